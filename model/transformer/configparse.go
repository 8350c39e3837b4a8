package transformer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// fields reads config.json's keys with transformers' defaults.
type fields struct {
	m   map[string]json.RawMessage
	err error
}

func (f *fields) fail(key, format string, a ...any) {
	if f.err == nil {
		f.err = fmt.Errorf("%w: %s: field %q: %s", ErrConfig, ConfigFileName, key, fmt.Sprintf(format, a...))
	}
}

func (f *fields) raw(key string) (json.RawMessage, bool) {
	r, ok := f.m[key]
	if !ok || bytes.Equal(bytes.TrimSpace(r), []byte("null")) {
		return nil, false
	}
	return r, true
}

func (f *fields) num(key string, def float64) float64 {
	r, ok := f.raw(key)
	if !ok {
		return def
	}
	var v float64
	if err := json.Unmarshal(r, &v); err != nil {
		f.fail(key, "want a number, got %s", r)
	}
	return v
}

func (f *fields) integer(key string, def int) int {
	v := f.num(key, float64(def))
	if v != math.Trunc(v) || math.Abs(v) > 1<<40 {
		f.fail(key, "want an integer, got %v", v)
		return def
	}
	return int(v)
}

func (f *fields) optInt(key string) *int {
	if _, ok := f.raw(key); !ok {
		return nil
	}
	v := f.integer(key, 0)
	return &v
}

func (f *fields) boolean(key string, def bool) bool {
	r, ok := f.raw(key)
	if !ok {
		return def
	}
	var v bool
	if err := json.Unmarshal(r, &v); err != nil {
		f.fail(key, "want true or false, got %s", r)
	}
	return v
}

func (f *fields) str(key, def string) string {
	r, ok := f.raw(key)
	if !ok {
		return def
	}
	var v string
	if err := json.Unmarshal(r, &v); err != nil {
		f.fail(key, "want a string, got %s", r)
	}
	return v
}

// ints reads an int or a list of ints (eos_token_id).
func (f *fields) ints(key string) []int {
	r, ok := f.raw(key)
	if !ok {
		return nil
	}
	var one int
	if json.Unmarshal(r, &one) == nil {
		return []int{one}
	}
	var many []int
	if err := json.Unmarshal(r, &many); err != nil {
		f.fail(key, "want an integer or a list of integers, got %s", r)
	}
	return many
}

// ReadConfig reads and validates dir/config.json.
func ReadConfig(dir string) (*Config, error) {
	js, err := os.ReadFile(filepath.Join(dir, ConfigFileName))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return ParseConfig(js)
}

// ModelType returns config.json's model_type in dir ("" with an error when
// the file is missing or malformed), for loaders that dispatch on it.
func ModelType(dir string) (string, error) {
	js, err := os.ReadFile(filepath.Join(dir, ConfigFileName))
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrConfig, err)
	}
	var v struct {
		ModelType string `json:"model_type"`
	}
	if err := json.Unmarshal(js, &v); err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrConfig, ConfigFileName, err)
	}
	return v.ModelType, nil
}

// ParseConfig parses config.json with the semantics of transformers'
// configuration_<arch>.py: absent (or null) fields take the class
// defaults (see defaults), a known field of the wrong type is an error
// naming it, unknown fields are ignored (HF configs carry many that do not
// change the forward pass), and fields that would change it in a way this
// package does not implement are refused.
func ParseConfig(js []byte) (*Config, error) {
	f := &fields{}
	if err := json.Unmarshal(js, &f.m); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrConfig, ConfigFileName, err)
	}
	mt := f.str("model_type", "")
	if f.err != nil {
		return nil, f.err
	}
	if !Supported(mt) {
		return nil, fmt.Errorf("%w: %s: model_type %q is not supported (supported: %s; the built-in policy's is %q)",
			ErrConfig, ConfigFileName, mt, archNames(), "asyncrl-window-mlp")
	}
	c := &Config{Arch: Arch(mt)}
	d := defaults[c.Arch]
	c.VocabSize = f.integer("vocab_size", d.vocab)
	c.HiddenSize = f.integer("hidden_size", d.hidden)
	c.IntermediateSize = f.integer("intermediate_size", d.inter)
	c.NumHiddenLayers = f.integer("num_hidden_layers", d.layers)
	c.NumAttentionHeads = f.integer("num_attention_heads", d.heads)
	c.NumKeyValueHeads = f.integer("num_key_value_heads", d.kvHeads)
	if _, set := f.raw("num_key_value_heads"); c.NumKeyValueHeads == 0 || (!set && f.m["num_key_value_heads"] != nil) {
		c.NumKeyValueHeads = c.NumAttentionHeads // null (or the default 0) → num_attention_heads
	}
	c.HeadDim = f.integer("head_dim", d.headDim)
	if c.HeadDim == 0 && c.NumAttentionHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	c.MaxPositionEmbeddings = f.integer("max_position_embeddings", d.maxPos)
	c.RMSNormEps = f.num("rms_norm_eps", 1e-6)
	c.InitializerRange = f.num("initializer_range", 0.02)
	c.TieWordEmbeddings = f.boolean("tie_word_embeddings", false)
	c.AttentionBias = f.boolean("attention_bias", false)
	if c.Arch == Llama {
		c.MLPBias = f.boolean("mlp_bias", false)
	}
	c.BOSTokenID = f.optInt("bos_token_id")
	c.EOSTokenIDs = f.ints("eos_token_id")
	c.PadTokenID = f.optInt("pad_token_id")
	if act := f.str("hidden_act", "silu"); act != "silu" {
		f.fail("hidden_act", "only \"silu\" (SwiGLU) is implemented, got %q", act)
	}
	if f.boolean("use_sliding_window", false) {
		f.fail("use_sliding_window", "sliding-window attention is not implemented; set it to false")
	}
	if v := f.num("partial_rotary_factor", 1); v != 1 {
		f.fail("partial_rotary_factor", "only 1 is implemented, got %v", v)
	}
	if v := f.integer("pretraining_tp", 1); v != 1 {
		f.fail("pretraining_tp", "only 1 is implemented, got %d", v)
	}
	c.parseRope(f, d.ropeTheta)
	switch c.Arch {
	case Qwen3MoE:
		c.NumExperts = f.integer("num_experts", 128)
		c.NumExpertsPerTok = f.integer("num_experts_per_tok", 8)
		c.MoEIntermediateSize = f.integer("moe_intermediate_size", 768)
		c.NormTopKProb = f.boolean("norm_topk_prob", false)
		c.DecoderSparseStep = f.integer("decoder_sparse_step", 1)
		c.parseMLPOnly(f)
	case DeepseekV3:
		c.parseDeepseek(f)
	}
	c.parseQuant(f)
	if f.err != nil {
		return nil, f.err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Config) parseMLPOnly(f *fields) {
	r, ok := f.raw("mlp_only_layers")
	if !ok {
		return
	}
	if err := json.Unmarshal(r, &c.MLPOnlyLayers); err != nil {
		f.fail("mlp_only_layers", "want a list of layer indices, got %s", r)
	}
}

// parseDeepseek reads DeepseekV3Config's fields (configuration_deepseek_v3.py
// @001f85b3) and the DeepSeek checkpoints' own router keys.
func (c *Config) parseDeepseek(f *fields) {
	c.MoEIntermediateSize = f.integer("moe_intermediate_size", 2048)
	c.NSharedExperts = f.integer("n_shared_experts", 1)
	c.NumExperts = f.integer("n_routed_experts", 256)
	c.RoutedScalingFactor = f.num("routed_scaling_factor", 2.5)
	c.KVLoraRank = f.integer("kv_lora_rank", 512)
	// q_lora_rank null means no query compression: q_proj instead of
	// q_a_proj/q_a_layernorm/q_b_proj (DeepseekV3Attention.__init__).
	if _, ok := f.raw("q_lora_rank"); ok {
		c.QLoraRank = f.integer("q_lora_rank", 0)
	} else if _, present := f.m["q_lora_rank"]; !present {
		c.QLoraRank = 1536
	}
	c.QKRopeHeadDim = f.integer("qk_rope_head_dim", 64)
	c.VHeadDim = f.integer("v_head_dim", 128)
	c.QKNopeHeadDim = f.integer("qk_nope_head_dim", 128)
	c.NGroup = f.integer("n_group", 8)
	c.TopKGroup = f.integer("topk_group", 4)
	c.NumExpertsPerTok = f.integer("num_experts_per_tok", 8)
	c.FirstKDenseReplace = f.integer("first_k_dense_replace", 3)
	c.NormTopKProb = f.boolean("norm_topk_prob", true)
	c.RopeInterleave = f.boolean("rope_interleave", true)
	// transformers ignores moe_layer_freq (every layer from
	// first_k_dense_replace on is MoE) while vLLM's deepseek_v2.py also
	// requires layer % moe_layer_freq == 0: they agree only at 1.
	if v := f.integer("moe_layer_freq", 1); v != 1 {
		f.fail("moe_layer_freq", "only 1 is implemented (transformers and vLLM disagree on other values), got %d", v)
	}
	if s := f.str("scoring_func", "sigmoid"); s != "sigmoid" {
		f.fail("scoring_func", "DeepseekV3TopkRouter scores with a sigmoid; got %q", s)
	}
	if s := f.str("topk_method", "noaux_tc"); s != "noaux_tc" {
		f.fail("topk_method", "only \"noaux_tc\" (group-limited top-k with e_score_correction_bias) is implemented, got %q", s)
	}
	// HF's DeepseekV3Config sets head_dim = qk_rope_head_dim (the rope
	// functions read it); the attention uses qk_nope+qk_rope and v_head_dim.
	c.HeadDim = c.QKRopeHeadDim
}

func (c *Config) parseRope(f *fields, defTheta float64) {
	c.RopeTheta = f.num("rope_theta", defTheta)
	raw, ok := f.raw("rope_scaling")
	key := "rope_scaling"
	if !ok { // transformers v5 writes rope_parameters (with rope_theta inside)
		raw, ok = f.raw("rope_parameters")
		key = "rope_parameters"
	}
	if !ok {
		return
	}
	g := &fields{}
	if err := json.Unmarshal(raw, &g.m); err != nil {
		f.fail(key, "want an object, got %s", raw)
		return
	}
	typ := g.str("rope_type", g.str("type", "default"))
	if g.err != nil {
		f.fail(key, "%v", g.err)
		return
	}
	if _, ok := g.raw("rope_theta"); ok {
		c.RopeTheta = g.num("rope_theta", c.RopeTheta)
	}
	r := &RopeScaling{Type: typ}
	switch typ {
	case "default":
		return
	case "linear":
		r.Factor = g.num("factor", 0)
	case "llama3":
		r.Factor = g.num("factor", 0)
		r.LowFreqFactor = g.num("low_freq_factor", 0)
		r.HighFreqFactor = g.num("high_freq_factor", 0)
		r.OriginalMaxPositionEmbeddings = g.integer("original_max_position_embeddings", 0)
		if r.LowFreqFactor <= 0 || r.HighFreqFactor <= r.LowFreqFactor || r.OriginalMaxPositionEmbeddings <= 0 {
			f.fail(key, "llama3 needs low_freq_factor > 0, high_freq_factor > low_freq_factor and original_max_position_embeddings > 0")
		}
	case "yarn", "deepseek_yarn":
		r.Type = "yarn"
		r.Factor = g.num("factor", 0)
		r.AttentionFactor = g.num("attention_factor", 0)
		r.BetaFast = g.num("beta_fast", 0)
		r.BetaSlow = g.num("beta_slow", 0)
		r.MScale = g.num("mscale", 0)
		r.MScaleAllDim = g.num("mscale_all_dim", 0)
		r.OriginalMaxPositionEmbeddings = g.integer("original_max_position_embeddings", 0)
		if r.AttentionFactor < 0 {
			f.fail(key, "attention_factor must be > 0, got %v", r.AttentionFactor)
		}
	default:
		f.fail(key, "rope type %q is not implemented (implemented: default, linear, llama3, yarn)", typ)
		return
	}
	if g.err != nil {
		f.fail(key, "%v", g.err)
		return
	}
	if r.Factor < 1 {
		f.fail(key, "factor must be >= 1, got %v", r.Factor)
	}
	c.Rope = r
}

// parseQuant reads quantization_config: block-wise FP8 (quant_method fp8
// with weight_block_size, DeepSeek-V3's and vLLM's Fp8Config form) or
// MXFP8 (ModelOpt's quant_algo MXFP8), the two forms weights/quant writes.
func (c *Config) parseQuant(f *fields) {
	raw, ok := f.raw("quantization_config")
	if !ok {
		return
	}
	c.QuantizationConfigRaw = raw
	g := &fields{}
	if err := json.Unmarshal(raw, &g.m); err != nil {
		f.fail("quantization_config", "want an object, got %s", raw)
		return
	}
	switch m := g.str("quant_method", ""); {
	case m == "fp8":
		var bs []int
		if r, ok := g.raw("weight_block_size"); ok {
			if err := json.Unmarshal(r, &bs); err != nil || len(bs) != 2 || bs[0] <= 0 || bs[1] <= 0 {
				f.fail("quantization_config", "weight_block_size must be [rows, cols], got %s", r)
				return
			}
		} else {
			f.fail("quantization_config", "fp8 without weight_block_size (per-tensor FP8) is not implemented; block-wise FP8 needs weight_block_size")
			return
		}
		c.Quant, c.QuantBlock = "fp8", [2]int{bs[0], bs[1]}
	case m == "modelopt" && strings.EqualFold(g.str("quant_algo", ""), "MXFP8"):
		c.Quant = "mxfp8"
	default:
		f.fail("quantization_config", "quant_method %q is not implemented (implemented: fp8 with weight_block_size, modelopt MXFP8)", m)
	}
	if g.err != nil {
		f.fail("quantization_config", "%v", g.err)
	}
}
