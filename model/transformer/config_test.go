package transformer

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// Fixtures shaped like the config.json files of the families' hub
// checkpoints (Qwen3-0.6B, Qwen3-30B-A3B, Llama-3.1-8B, DeepSeek-V3),
// shrunk only in the sizes.
const (
	qwen3JSON = `{"architectures":["Qwen3ForCausalLM"],"attention_bias":false,"attention_dropout":0.0,
"bos_token_id":151643,"eos_token_id":151645,"head_dim":128,"hidden_act":"silu","hidden_size":1024,
"initializer_range":0.02,"intermediate_size":3072,"max_position_embeddings":40960,"max_window_layers":28,
"model_type":"qwen3","num_attention_heads":16,"num_hidden_layers":28,"num_key_value_heads":8,"rms_norm_eps":1e-06,
"rope_scaling":null,"rope_theta":1000000,"sliding_window":null,"tie_word_embeddings":true,"torch_dtype":"bfloat16",
"transformers_version":"4.51.0","use_cache":true,"use_sliding_window":false,"vocab_size":151936}`
	qwen3MoEJSON = `{"architectures":["Qwen3MoeForCausalLM"],"attention_bias":false,"bos_token_id":151643,
"decoder_sparse_step":1,"eos_token_id":151645,"head_dim":128,"hidden_act":"silu","hidden_size":2048,
"intermediate_size":6144,"max_position_embeddings":40960,"mlp_only_layers":[],"model_type":"qwen3_moe",
"moe_intermediate_size":768,"norm_topk_prob":true,"num_attention_heads":32,"num_experts":128,
"num_experts_per_tok":8,"num_hidden_layers":48,"num_key_value_heads":4,"rms_norm_eps":1e-06,"rope_scaling":null,
"rope_theta":1000000,"tie_word_embeddings":false,"torch_dtype":"bfloat16","vocab_size":151936}`
	llamaJSON = `{"architectures":["LlamaForCausalLM"],"attention_bias":false,"bos_token_id":128000,
"eos_token_id":[128001,128008,128009],"hidden_act":"silu","hidden_size":4096,"intermediate_size":14336,
"max_position_embeddings":131072,"mlp_bias":false,"model_type":"llama","num_attention_heads":32,
"num_hidden_layers":32,"num_key_value_heads":8,"pretraining_tp":1,"rms_norm_eps":1e-05,
"rope_scaling":{"factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192,"rope_type":"llama3"},
"rope_theta":500000.0,"tie_word_embeddings":false,"torch_dtype":"bfloat16","vocab_size":128256}`
	deepseekJSON = `{"architectures":["DeepseekV3ForCausalLM"],"attention_bias":false,"bos_token_id":0,"eos_token_id":1,
"ep_size":1,"first_k_dense_replace":3,"hidden_act":"silu","hidden_size":7168,"intermediate_size":18432,
"kv_lora_rank":512,"max_position_embeddings":163840,"model_type":"deepseek_v3","moe_intermediate_size":2048,
"moe_layer_freq":1,"n_group":8,"n_routed_experts":256,"n_shared_experts":1,"norm_topk_prob":true,
"num_attention_heads":128,"num_experts_per_tok":8,"num_hidden_layers":61,"num_key_value_heads":128,
"num_nextn_predict_layers":1,"q_lora_rank":1536,"qk_nope_head_dim":128,"qk_rope_head_dim":64,
"rms_norm_eps":1e-06,"rope_scaling":{"beta_fast":32,"beta_slow":1,"factor":40,"mscale":1.0,"mscale_all_dim":1.0,
"original_max_position_embeddings":4096,"type":"yarn"},"rope_theta":10000,"routed_scaling_factor":2.5,
"scoring_func":"sigmoid","tie_word_embeddings":false,"topk_group":4,"topk_method":"noaux_tc",
"torch_dtype":"bfloat16","v_head_dim":128,"vocab_size":129280,
"quantization_config":{"activation_scheme":"dynamic","fmt":"e4m3","quant_method":"fp8","weight_block_size":[128,128]}}`
)

func TestParseConfigFamilies(t *testing.T) {
	c, err := ParseConfig([]byte(qwen3JSON))
	if err != nil {
		t.Fatal(err)
	}
	if c.Arch != Qwen3 || c.HeadDim != 128 || c.NumKeyValueHeads != 8 || !c.TieWordEmbeddings || c.RopeTheta != 1e6 || c.Rope != nil || c.EOSTokenIDs[0] != 151645 || c.MoE() {
		t.Errorf("qwen3: %+v", c)
	}
	c, err = ParseConfig([]byte(qwen3MoEJSON))
	if err != nil {
		t.Fatal(err)
	}
	if c.NumExperts != 128 || c.NumExpertsPerTok != 8 || !c.NormTopKProb || c.MoEIntermediateSize != 768 || !c.IsMoELayer(0) || !c.IsMoELayer(47) {
		t.Errorf("qwen3_moe: %+v", c)
	}
	c, err = ParseConfig([]byte(llamaJSON))
	if err != nil {
		t.Fatal(err)
	}
	if c.HeadDim != 128 || c.Rope == nil || c.Rope.Type != "llama3" || c.Rope.Factor != 8 || c.Rope.OriginalMaxPositionEmbeddings != 8192 || len(c.EOSTokenIDs) != 3 || c.RMSNormEps != 1e-5 {
		t.Errorf("llama: %+v %+v", c, c.Rope)
	}
	c, err = ParseConfig([]byte(deepseekJSON))
	if err != nil {
		t.Fatal(err)
	}
	if c.QLoraRank != 1536 || c.KVLoraRank != 512 || c.QKHeadDim() != 192 || c.VDim() != 128 || c.Rope.Type != "yarn" ||
		c.Rope.MScaleAllDim != 1 || !c.RopeInterleave || c.IsMoELayer(2) || !c.IsMoELayer(3) || c.Quant != "fp8" || c.QuantBlock != [2]int{128, 128} || c.HeadDim != 64 {
		t.Errorf("deepseek_v3: %+v %+v", c, c.Rope)
	}
	// DeepSeek-V3's softmax scale: 192^-½ · (0.1·ln 40 + 1)².
	want := math.Pow(192, -0.5) * math.Pow(0.1*math.Log(40)+1, 2)
	if got := float64(softmaxScale(c)); math.Abs(got-want) > 1e-6 {
		t.Errorf("deepseek softmax scale %v, want %v", got, want)
	}
}

func TestParseConfigDefaultsAndForms(t *testing.T) {
	// Absent fields take the class defaults: Qwen3's head_dim is 128, not
	// hidden/heads; Llama's is hidden/heads; num_key_value_heads null is
	// num_attention_heads.
	c, err := ParseConfig([]byte(`{"model_type":"qwen3","hidden_size":64,"num_attention_heads":4,"num_key_value_heads":null,"vocab_size":10}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.HeadDim != 128 || c.NumKeyValueHeads != 4 || c.NumHiddenLayers != 32 || c.RopeTheta != 10000 {
		t.Errorf("qwen3 defaults: %+v", c)
	}
	c, err = ParseConfig([]byte(`{"model_type":"llama","hidden_size":64,"num_attention_heads":4,"vocab_size":10}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.HeadDim != 16 || c.NumKeyValueHeads != 4 || c.MaxPositionEmbeddings != 2048 {
		t.Errorf("llama defaults: %+v", c)
	}
	// q_lora_rank null → q_proj; absent → 1536.
	c, err = ParseConfig([]byte(`{"model_type":"deepseek_v3","q_lora_rank":null}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.QLoraRank != 0 {
		t.Errorf("q_lora_rank null gave %d", c.QLoraRank)
	}
	w := build(&Config{Arch: DeepseekV3, VocabSize: 8, HiddenSize: 8, IntermediateSize: 8, NumHiddenLayers: 1, NumAttentionHeads: 2,
		NumKeyValueHeads: 2, MaxPositionEmbeddings: 8, KVLoraRank: 4, QKNopeHeadDim: 2, QKRopeHeadDim: 2, VHeadDim: 2,
		FirstKDenseReplace: 1, RMSNormEps: 1e-6, RopeTheta: 10000})
	if _, ok := w.byName("model.layers.0.self_attn.q_proj.weight"); !ok {
		t.Error("q_lora_rank 0 has no q_proj")
	}
	if _, ok := w.byName("model.layers.0.self_attn.q_a_proj.weight"); ok {
		t.Error("q_lora_rank 0 has q_a_proj")
	}
	c, err = ParseConfig([]byte(`{"model_type":"deepseek_v3"}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.QLoraRank != 1536 || c.NumExperts != 256 || c.FirstKDenseReplace != 3 {
		t.Errorf("deepseek defaults: %+v", c)
	}
	// transformers v5's rope_parameters (rope_theta inside) and the old
	// "type" spelling parse as rope_scaling does.
	a, err := ParseConfig([]byte(`{"model_type":"llama","hidden_size":64,"num_attention_heads":4,"vocab_size":10,
		"rope_parameters":{"rope_type":"llama3","rope_theta":500000,"factor":8,"low_freq_factor":1,"high_freq_factor":4,"original_max_position_embeddings":8192}}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseConfig([]byte(`{"model_type":"llama","hidden_size":64,"num_attention_heads":4,"vocab_size":10,"rope_theta":500000,
		"rope_scaling":{"type":"llama3","factor":8,"low_freq_factor":1,"high_freq_factor":4,"original_max_position_embeddings":8192}}`))
	if err != nil {
		t.Fatal(err)
	}
	if a.RopeTheta != 500000 || *a.Rope != *b.Rope || a.RopeTheta != b.RopeTheta {
		t.Errorf("rope_parameters %+v vs rope_scaling %+v", a.Rope, b.Rope)
	}
	// MLP-only layers of qwen3_moe.
	c, err = ParseConfig([]byte(`{"model_type":"qwen3_moe","num_hidden_layers":4,"decoder_sparse_step":2,"mlp_only_layers":[3]}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.IsMoELayer(0) || !c.IsMoELayer(1) || c.IsMoELayer(2) || c.IsMoELayer(3) {
		t.Errorf("sparse step / mlp_only_layers: %v %v %v %v", c.IsMoELayer(0), c.IsMoELayer(1), c.IsMoELayer(2), c.IsMoELayer(3))
	}
}

func TestParseConfigRefusals(t *testing.T) {
	for _, tc := range []struct{ js, field string }{
		{`{"model_type":"gpt2"}`, "model_type"},
		{`{"model_type":"qwen3","vocab_size":"many"}`, "vocab_size"},
		{`{"model_type":"qwen3","hidden_act":"gelu"}`, "hidden_act"},
		{`{"model_type":"qwen3","use_sliding_window":true}`, "use_sliding_window"},
		{`{"model_type":"qwen3","rope_scaling":{"rope_type":"dynamic","factor":2}}`, "rope_scaling"},
		{`{"model_type":"llama","rope_scaling":{"rope_type":"llama3","factor":8}}`, "rope_scaling"},
		{`{"model_type":"deepseek_v3","scoring_func":"softmax"}`, "scoring_func"},
		{`{"model_type":"deepseek_v3","topk_method":"greedy"}`, "topk_method"},
		{`{"model_type":"deepseek_v3","moe_layer_freq":2}`, "moe_layer_freq"},
		{`{"model_type":"deepseek_v3","n_group":7}`, "n_group"},
		{`{"model_type":"deepseek_v3","n_shared_experts":0}`, "n_shared_experts"},
		{`{"model_type":"qwen3_moe","num_experts_per_tok":300}`, "num_experts_per_tok"},
		{`{"model_type":"qwen3","quantization_config":{"quant_method":"awq"}}`, "quantization_config"},
		{`{"model_type":"qwen3","eos_token_id":200000}`, "eos_token_id"},
	} {
		_, err := ParseConfig([]byte(tc.js))
		if err == nil {
			t.Errorf("%s: accepted", tc.js)
			continue
		}
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "config.json") || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: error %q does not name config.json and %q", tc.js, err, tc.field)
		}
	}
}

// TestRopeScalingFrequencies pins the rope variants' inverse frequencies
// to transformers' formulas (modeling_rope_utils.py) evaluated in float64.
func TestRopeScalingFrequencies(t *testing.T) {
	llama, err := ParseConfig([]byte(llamaJSON))
	if err != nil {
		t.Fatal(err)
	}
	inv, attn := ropeInvFreq(llama, 128)
	if attn != 1 {
		t.Errorf("llama3 attention factor %v", attn)
	}
	for i, got := range inv {
		f := 1 / math.Pow(500000, float64(2*i)/128)
		wave := 2 * math.Pi / f
		want := f
		switch {
		case wave < 8192.0/4: // high frequency: kept
		case wave > 8192.0/1: // low frequency: divided by factor
			want = f / 8
		default:
			s := (8192/wave - 1) / (4 - 1)
			want = (1-s)*f/8 + s*f
		}
		if math.Abs(float64(got)-want) > 1e-6*want {
			t.Fatalf("llama3 inv_freq[%d] = %v, want %v", i, got, want)
		}
	}
	ds, err := ParseConfig([]byte(deepseekJSON))
	if err != nil {
		t.Fatal(err)
	}
	inv, attn = ropeInvFreq(ds, 64)
	// mscale = mscale_all_dim: the cos/sin factor is 1 (the scaling goes
	// into the softmax scale instead).
	if attn != 1 {
		t.Errorf("deepseek yarn attention factor %v, want 1", attn)
	}
	corr := func(rot float64) float64 { return 64 * math.Log(4096/(rot*2*math.Pi)) / (2 * math.Log(10000)) }
	low, high := math.Floor(corr(32)), math.Ceil(corr(1))
	for i, got := range inv {
		pf := math.Pow(10000, float64(2*i)/64)
		ramp := math.Min(math.Max((float64(i)-low)/(high-low), 0), 1)
		ef := 1 - ramp
		want := (1/(40*pf))*(1-ef) + (1/pf)*ef
		if math.Abs(float64(got)-want) > 1e-6*want {
			t.Fatalf("yarn inv_freq[%d] = %v, want %v", i, got, want)
		}
	}
	// Without mscale_all_dim, yarn's attention factor is 0.1·ln(factor)+1.
	r := *ds.Rope
	r.MScale, r.MScaleAllDim = 0, 0
	ds.Rope = &r
	if _, attn := ropeInvFreq(ds, 64); math.Abs(float64(attn)-(0.1*math.Log(40)+1)) > 1e-6 {
		t.Errorf("yarn default attention factor %v", attn)
	}
}
