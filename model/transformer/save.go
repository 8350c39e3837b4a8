package transformer

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"

	"github.com/asyncrl/asyncrl/weights/safetensors"
)

// roundBF16 rounds every value to BF16 (round to nearest even), what a
// checkpoint stores.
func roundBF16(d []float32) {
	for i, v := range d {
		d[i] = safetensors.Float32FromBF16(safetensors.BF16FromFloat32(v))
	}
}

// ConfigJSON returns config.json as transformers' save_pretrained writes
// it for c's architecture (sorted keys, two-space indent): the class's
// fields (configuration_<arch>.py), "architectures" with the
// *ForCausalLM class, "model_type" and "torch_dtype": "bfloat16". For
// deepseek_v3 it adds the keys DeepSeek's own config carries and vLLM's
// deepseek_v2.py reads to build the same model: scoring_func "sigmoid",
// topk_method "noaux_tc" (the correction bias) and moe_layer_freq 1.
func (c *Config) ConfigJSON() ([]byte, error) {
	m := map[string]any{
		"architectures":           []string{architectures[c.Arch]},
		"model_type":              string(c.Arch),
		"torch_dtype":             "bfloat16",
		"vocab_size":              c.VocabSize,
		"hidden_size":             c.HiddenSize,
		"intermediate_size":       c.IntermediateSize,
		"num_hidden_layers":       c.NumHiddenLayers,
		"num_attention_heads":     c.NumAttentionHeads,
		"num_key_value_heads":     c.NumKeyValueHeads,
		"head_dim":                c.HeadDim,
		"hidden_act":              "silu",
		"max_position_embeddings": c.MaxPositionEmbeddings,
		"initializer_range":       c.InitializerRange,
		"rms_norm_eps":            c.RMSNormEps,
		"use_cache":               true,
		"tie_word_embeddings":     c.TieWordEmbeddings,
		"rope_theta":              c.RopeTheta,
		"rope_scaling":            c.ropeJSON(),
		"attention_bias":          c.AttentionBias,
		"attention_dropout":       0.0,
	}
	if c.BOSTokenID != nil {
		m["bos_token_id"] = *c.BOSTokenID
	}
	switch len(c.EOSTokenIDs) {
	case 0:
	case 1:
		m["eos_token_id"] = c.EOSTokenIDs[0]
	default:
		m["eos_token_id"] = c.EOSTokenIDs
	}
	if c.PadTokenID != nil {
		m["pad_token_id"] = *c.PadTokenID
	}
	switch c.Arch {
	case Qwen3, Qwen3MoE:
		maps.Copy(m, map[string]any{"use_sliding_window": false, "sliding_window": nil, "max_window_layers": c.NumHiddenLayers})
		if c.Arch == Qwen3MoE {
			only := c.MLPOnlyLayers
			if only == nil {
				only = []int{}
			}
			maps.Copy(m, map[string]any{"num_experts": c.NumExperts, "num_experts_per_tok": c.NumExpertsPerTok,
				"moe_intermediate_size": c.MoEIntermediateSize, "norm_topk_prob": c.NormTopKProb,
				"decoder_sparse_step": c.DecoderSparseStep, "mlp_only_layers": only,
				"output_router_logits": false, "router_aux_loss_coef": 0.001})
		}
	case Llama:
		maps.Copy(m, map[string]any{"mlp_bias": c.MLPBias, "pretraining_tp": 1})
	case DeepseekV3:
		var q any
		if c.QLoraRank > 0 {
			q = c.QLoraRank
		}
		maps.Copy(m, map[string]any{"q_lora_rank": q, "kv_lora_rank": c.KVLoraRank,
			"qk_nope_head_dim": c.QKNopeHeadDim, "qk_rope_head_dim": c.QKRopeHeadDim, "v_head_dim": c.VHeadDim,
			"qk_head_dim": c.QKHeadDim(), "n_routed_experts": c.NumExperts, "n_shared_experts": c.NSharedExperts,
			"num_experts_per_tok": c.NumExpertsPerTok, "moe_intermediate_size": c.MoEIntermediateSize,
			"n_group": c.NGroup, "topk_group": c.TopKGroup, "routed_scaling_factor": c.RoutedScalingFactor,
			"norm_topk_prob": c.NormTopKProb, "first_k_dense_replace": c.FirstKDenseReplace,
			"rope_interleave": c.RopeInterleave, "pretraining_tp": 1,
			"scoring_func": "sigmoid", "topk_method": "noaux_tc", "moe_layer_freq": 1})
	}
	if len(c.QuantizationConfigRaw) > 0 {
		m["quantization_config"] = c.QuantizationConfigRaw
	}
	return json.MarshalIndent(m, "", "  ")
}

// ropeJSON is rope_scaling as HF configs spell it (nil for default rope).
func (c *Config) ropeJSON() any {
	r := c.Rope
	if r == nil {
		return nil
	}
	out := map[string]any{"rope_type": r.Type, "factor": r.Factor}
	switch r.Type {
	case "llama3":
		out["low_freq_factor"] = r.LowFreqFactor
		out["high_freq_factor"] = r.HighFreqFactor
		out["original_max_position_embeddings"] = r.OriginalMaxPositionEmbeddings
	case "yarn":
		out["type"] = "yarn" // DeepSeek's own spelling, kept by vLLM's readers
		if r.OriginalMaxPositionEmbeddings > 0 {
			out["original_max_position_embeddings"] = r.OriginalMaxPositionEmbeddings
		}
		for k, v := range map[string]float64{"beta_fast": r.BetaFast, "beta_slow": r.BetaSlow, "mscale": r.MScale,
			"mscale_all_dim": r.MScaleAllDim, "attention_factor": r.AttentionFactor} {
			if v != 0 {
				out[k] = v
			}
		}
	}
	return out
}

// Save writes the checkpoint into dir (created if needed) as Hugging Face
// does: the weights in BF16 as model.safetensors, or, when maxShardBytes > 0
// and they are larger, model-0000i-of-0000N.safetensors shards plus
// model.safetensors.index.json; then config.json and
// generation_config.json. A tied lm_head is not written (HF drops the
// duplicate).
func (m *Model) Save(dir string, maxShardBytes int64) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("transformer: %w", err)
	}
	ts := make([]safetensors.Tensor, 0, len(m.w.tensors))
	for _, t := range m.w.tensors {
		shape := make([]int64, len(t.shape))
		for i, s := range t.shape {
			shape[i] = int64(s)
		}
		ts = append(ts, safetensors.Tensor{Name: t.name, DType: safetensors.BF16, Shape: shape, Data: safetensors.EncodeBF16(*t.data)})
	}
	if _, err := safetensors.WriteSharded(dir, ts, maxShardBytes, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("transformer: saving %s: %w", dir, err)
	}
	cfg, err := m.cfg.ConfigJSON()
	if err != nil {
		return fmt.Errorf("transformer: %w", err)
	}
	gen, err := m.gen.marshal()
	if err != nil {
		return fmt.Errorf("transformer: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(dir, GenerationConfigFileName), gen); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, ConfigFileName), cfg)
}

// writeFileAtomic writes data (plus a newline) via a temporary file and
// a rename, so a reader never sees half a file.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("transformer: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("transformer: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("transformer: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("transformer: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("transformer: %w", err)
	}
	return nil
}
