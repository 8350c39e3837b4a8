package transformer

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// ErrConfig wraps every config.json / generation_config.json error.
var ErrConfig = errors.New("transformer: bad config")

// ErrCheckpoint wraps every checkpoint (tensor) error.
var ErrCheckpoint = errors.New("transformer: bad checkpoint")

// File names of a Hugging Face checkpoint directory.
const (
	ConfigFileName           = "config.json"
	GenerationConfigFileName = "generation_config.json"
)

// Arch is a Hugging Face model_type this package implements.
type Arch string

// The supported architectures.
const (
	Qwen3      Arch = "qwen3"
	Qwen3MoE   Arch = "qwen3_moe"
	Llama      Arch = "llama"
	DeepseekV3 Arch = "deepseek_v3"
)

// Archs lists the supported model types.
func Archs() []Arch { return []Arch{Qwen3, Qwen3MoE, Llama, DeepseekV3} }

func archNames() string {
	var s []string
	for _, a := range Archs() {
		s = append(s, string(a))
	}
	return strings.Join(s, ", ")
}

// Supported reports whether model_type names an architecture of this
// package.
func Supported(modelType string) bool { return slices.Contains(Archs(), Arch(modelType)) }

// architectures is config.json's "architectures" entry HF writes per type
// (the *ForCausalLM class of each modeling file).
var architectures = map[Arch]string{
	Qwen3:      "Qwen3ForCausalLM",
	Qwen3MoE:   "Qwen3MoeForCausalLM",
	Llama:      "LlamaForCausalLM",
	DeepseekV3: "DeepseekV3ForCausalLM",
}

// RopeScaling is config.json's rope_scaling (transformers' rope_parameters
// in v5): the rope type and its parameters. Type is "default", "linear",
// "llama3" or "yarn"; the others (dynamic, longrope) are refused.
type RopeScaling struct {
	Type string
	// Factor scales the wavelengths (linear, llama3, yarn).
	Factor float64
	// OriginalMaxPositionEmbeddings: llama3's old_context_len, yarn's
	// pretraining length (0 = absent).
	OriginalMaxPositionEmbeddings int
	// llama3.
	LowFreqFactor, HighFreqFactor float64
	// yarn: AttentionFactor (0 = derived), BetaFast/BetaSlow (0 = 32/1),
	// MScale/MScaleAllDim (0 = absent).
	AttentionFactor, BetaFast, BetaSlow, MScale, MScaleAllDim float64
}

// Config is a parsed config.json of one of the supported architectures,
// with transformers' class defaults filled in for absent fields.
type Config struct {
	Arch                  Arch
	VocabSize             int
	HiddenSize            int
	IntermediateSize      int
	NumHiddenLayers       int
	NumAttentionHeads     int
	NumKeyValueHeads      int
	HeadDim               int
	MaxPositionEmbeddings int
	RMSNormEps            float64
	RopeTheta             float64
	Rope                  *RopeScaling // nil: default rope
	TieWordEmbeddings     bool
	AttentionBias         bool
	MLPBias               bool // llama
	InitializerRange      float64
	BOSTokenID            *int
	EOSTokenIDs           []int
	PadTokenID            *int

	// Mixture of experts (qwen3_moe, deepseek_v3).
	NumExperts          int // qwen3_moe num_experts, deepseek n_routed_experts
	NumExpertsPerTok    int
	MoEIntermediateSize int
	NormTopKProb        bool
	DecoderSparseStep   int   // qwen3_moe
	MLPOnlyLayers       []int // qwen3_moe

	// DeepSeek-V3: multi-head latent attention and its router.
	QLoraRank           int // 0: q_proj (config null)
	KVLoraRank          int
	QKNopeHeadDim       int
	QKRopeHeadDim       int
	VHeadDim            int
	NSharedExperts      int
	NGroup              int
	TopKGroup           int
	RoutedScalingFactor float64
	FirstKDenseReplace  int
	RopeInterleave      bool

	// Quant is the checkpoint's quantization_config scheme ("" none,
	// "fp8" block-wise with BlockRows×BlockCols, "mxfp8").
	Quant                 string
	QuantBlock            [2]int
	QuantizationConfigRaw json.RawMessage
}

// IsMoELayer reports whether decoder layer l has a mixture of experts
// (transformers: Qwen3MoeDecoderLayer builds Qwen3MoeSparseMoeBlock when l
// is not in mlp_only_layers and (l+1) % decoder_sparse_step == 0 —
// modeling_qwen3_moe.py @00d4b3d2; DeepseekV3DecoderLayer when l >=
// first_k_dense_replace — modeling_deepseek_v3.py @00b676f8).
func (c *Config) IsMoELayer(l int) bool {
	switch c.Arch {
	case Qwen3MoE:
		return !slices.Contains(c.MLPOnlyLayers, l) && c.NumExperts > 0 && (l+1)%c.DecoderSparseStep == 0
	case DeepseekV3:
		return l >= c.FirstKDenseReplace
	}
	return false
}

// MoE reports whether the model has any expert layer.
func (c *Config) MoE() bool {
	for l := range c.NumHiddenLayers {
		if c.IsMoELayer(l) {
			return true
		}
	}
	return false
}

// MLA reports multi-head latent attention (deepseek_v3).
func (c *Config) MLA() bool { return c.Arch == DeepseekV3 }

// QKHeadDim is the query/key head size (MLA: nope + rope).
func (c *Config) QKHeadDim() int {
	if c.MLA() {
		return c.QKNopeHeadDim + c.QKRopeHeadDim
	}
	return c.HeadDim
}

// VDim is the value head size.
func (c *Config) VDim() int {
	if c.MLA() {
		return c.VHeadDim
	}
	return c.HeadDim
}

// KVHeads is the number of cached key/value heads (MLA caches the
// decompressed keys and values of every head, as transformers does).
func (c *Config) KVHeads() int {
	if c.MLA() {
		return c.NumAttentionHeads
	}
	return c.NumKeyValueHeads
}

// RopeDim is the number of rotated dimensions per head.
func (c *Config) RopeDim() int {
	if c.MLA() {
		return c.QKRopeHeadDim
	}
	return c.HeadDim
}

type archDefaults struct {
	vocab, hidden, inter, layers, heads, kvHeads, headDim, maxPos int
	ropeTheta                                                     float64
}

// defaults are transformers' class defaults: Qwen3Config
// (configuration_qwen3.py @008e5743: head_dim 128), Qwen3MoeConfig
// (configuration_qwen3_moe.py @26f4b0f6: no head_dim argument, so
// hidden/heads), LlamaConfig (configuration_llama.py @008e5743: head_dim
// hidden/heads), DeepseekV3Config (configuration_deepseek_v3.py @001f85b3).
// headDim 0 means hidden_size / num_attention_heads; kvHeads 0 means
// num_attention_heads.
var defaults = map[Arch]archDefaults{
	Qwen3:      {vocab: 151936, hidden: 4096, inter: 22016, layers: 32, heads: 32, kvHeads: 32, headDim: 128, maxPos: 32768, ropeTheta: 10000},
	Qwen3MoE:   {vocab: 151936, hidden: 2048, inter: 6144, layers: 24, heads: 32, kvHeads: 4, maxPos: 32768, ropeTheta: 10000},
	Llama:      {vocab: 32000, hidden: 4096, inter: 11008, layers: 32, heads: 32, maxPos: 2048, ropeTheta: 10000},
	DeepseekV3: {vocab: 129280, hidden: 7168, inter: 18432, layers: 61, heads: 128, kvHeads: 128, maxPos: 4096, ropeTheta: 10000},
}

// Validate checks the sizes fit together; errors name config.json's field.
func (c *Config) Validate() error {
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("%w: %s: field %q: %s", ErrConfig, ConfigFileName, field, fmt.Sprintf(format, a...))
	}
	pos := []struct {
		name string
		v    int
	}{{"vocab_size", c.VocabSize}, {"hidden_size", c.HiddenSize}, {"intermediate_size", c.IntermediateSize},
		{"num_hidden_layers", c.NumHiddenLayers}, {"num_attention_heads", c.NumAttentionHeads},
		{"max_position_embeddings", c.MaxPositionEmbeddings}}
	if !c.MLA() {
		pos = append(pos, struct {
			name string
			v    int
		}{"num_key_value_heads", c.NumKeyValueHeads}, struct {
			name string
			v    int
		}{"head_dim", c.HeadDim})
	}
	for _, p := range pos {
		if p.v <= 0 {
			return bad(p.name, "must be > 0, got %d", p.v)
		}
	}
	if c.VocabSize > math.MaxInt32 {
		return bad("vocab_size", "must fit an int32, got %d", c.VocabSize)
	}
	if c.RMSNormEps <= 0 {
		return bad("rms_norm_eps", "must be > 0, got %v", c.RMSNormEps)
	}
	if c.RopeTheta <= 1 {
		return bad("rope_theta", "must be > 1, got %v", c.RopeTheta)
	}
	if c.InitializerRange < 0 {
		return bad("initializer_range", "must be >= 0, got %v", c.InitializerRange)
	}
	if !c.MLA() {
		if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
			return bad("num_key_value_heads", "%d must divide num_attention_heads %d", c.NumKeyValueHeads, c.NumAttentionHeads)
		}
		if c.HeadDim%2 != 0 {
			return bad("head_dim", "must be even (rotary pairs), got %d", c.HeadDim)
		}
	}
	for _, id := range c.EOSTokenIDs {
		if id < 0 || id >= c.VocabSize {
			return bad("eos_token_id", "%d is outside the vocabulary [0, %d)", id, c.VocabSize)
		}
	}
	switch c.Arch {
	case Qwen3MoE:
		return c.validateQwen3MoE(bad)
	case DeepseekV3:
		return c.validateDeepseek(bad)
	}
	return nil
}

func (c *Config) validateQwen3MoE(bad func(string, string, ...any) error) error {
	if err := c.validateMoE(bad, "num_experts"); err != nil {
		return err
	}
	if c.DecoderSparseStep <= 0 {
		return bad("decoder_sparse_step", "must be > 0, got %d", c.DecoderSparseStep)
	}
	for _, l := range c.MLPOnlyLayers {
		if l < 0 || l >= c.NumHiddenLayers {
			return bad("mlp_only_layers", "layer %d is outside [0, %d)", l, c.NumHiddenLayers)
		}
	}
	return nil
}

func (c *Config) validateMoE(bad func(string, string, ...any) error, expertsField string) error {
	if c.NumExperts <= 0 {
		return bad(expertsField, "must be > 0, got %d", c.NumExperts)
	}
	if c.NumExpertsPerTok <= 0 || c.NumExpertsPerTok > c.NumExperts {
		return bad("num_experts_per_tok", "must be in [1, %d], got %d", c.NumExperts, c.NumExpertsPerTok)
	}
	if c.MoEIntermediateSize <= 0 {
		return bad("moe_intermediate_size", "must be > 0, got %d", c.MoEIntermediateSize)
	}
	if c.NumExperts > 1<<16 {
		return bad(expertsField, "at most 65536 experts, got %d", c.NumExperts)
	}
	return nil
}

func (c *Config) validateDeepseek(bad func(string, string, ...any) error) error {
	if err := c.validateMoE(bad, "n_routed_experts"); err != nil {
		return err
	}
	for _, p := range []struct {
		name string
		v    int
	}{{"kv_lora_rank", c.KVLoraRank}, {"qk_nope_head_dim", c.QKNopeHeadDim}, {"qk_rope_head_dim", c.QKRopeHeadDim},
		{"v_head_dim", c.VHeadDim}, {"n_group", c.NGroup}, {"topk_group", c.TopKGroup}} {
		if p.v <= 0 {
			return bad(p.name, "must be > 0, got %d", p.v)
		}
	}
	if c.QLoraRank < 0 {
		return bad("q_lora_rank", "must be > 0 or null, got %d", c.QLoraRank)
	}
	if c.QKRopeHeadDim%2 != 0 {
		return bad("qk_rope_head_dim", "must be even (rotary pairs), got %d", c.QKRopeHeadDim)
	}
	if c.NSharedExperts < 1 {
		return bad("n_shared_experts", "must be >= 1 (DeepseekV3MoE always builds shared_experts), got %d", c.NSharedExperts)
	}
	if c.NumExperts%c.NGroup != 0 {
		return bad("n_group", "%d must divide n_routed_experts %d", c.NGroup, c.NumExperts)
	}
	if c.NumExperts/c.NGroup < 2 {
		return bad("n_group", "each group needs >= 2 experts (a group scores its top-2), got %d per group", c.NumExperts/c.NGroup)
	}
	if c.TopKGroup > c.NGroup {
		return bad("topk_group", "must be <= n_group %d, got %d", c.NGroup, c.TopKGroup)
	}
	if c.NumExpertsPerTok > c.TopKGroup*(c.NumExperts/c.NGroup) {
		return bad("num_experts_per_tok", "%d exceeds the %d experts of topk_group groups", c.NumExpertsPerTok, c.TopKGroup*(c.NumExperts/c.NGroup))
	}
	if c.FirstKDenseReplace < 0 {
		return bad("first_k_dense_replace", "must be >= 0, got %d", c.FirstKDenseReplace)
	}
	if c.RoutedScalingFactor <= 0 {
		return bad("routed_scaling_factor", "must be > 0, got %v", c.RoutedScalingFactor)
	}
	return nil
}
