package transformer

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// Preset names a model size for Preset.
type Preset string

// The presets asyncrl model init offers.
const (
	// PresetTiny: hidden 64, 2 layers (deepseek_v3: 3, the first dense),
	// 4 heads, 2 KV heads, head_dim 16, FFN 128; MoE 8 experts top-2
	// with expert FFN 32; DeepSeek n_group 2, topk_group 1, 1 shared
	// expert, MLA ranks q 32 / kv 32, qk_nope 16, qk_rope 8, v 16.
	PresetTiny Preset = "tiny"
	// PresetSmall: hidden 256, 4 layers (deepseek_v3: the first dense),
	// 8 heads, 4 KV heads, head_dim 32, FFN 768; MoE 16 experts top-4
	// with expert FFN 128; DeepSeek n_group 4, topk_group 2, 1 shared
	// expert, MLA ranks q 64 / kv 64, qk_nope 32, qk_rope 16, v 32.
	PresetSmall Preset = "small"
)

// Presets lists the preset names.
func Presets() []Preset { return []Preset{PresetTiny, PresetSmall} }

// NewPreset returns the config of arch at preset p with vocab tokens.
// The architecture-specific settings follow the family's real checkpoints
// at a small size: Qwen3 ties its embeddings (Qwen3-0.6B) and uses
// rope_theta 1e6; Qwen3-MoE normalises its top-k (Qwen3-30B-A3B); Llama
// uses Llama-3.1's rope_theta 500000 and "llama3" rope scaling (factor 8,
// low/high frequency factors 1/4, original context 8192); DeepSeek-V3
// uses yarn (factor 4 over an original 1024 positions, mscale and
// mscale_all_dim 1, as DeepSeek-V3's 40 over 4096), routed_scaling_factor
// 2.5 and a dense first layer. max_position_embeddings is 4096.
func NewPreset(arch Arch, p Preset, vocab int) (*Config, error) {
	if !Supported(string(arch)) {
		return nil, fmt.Errorf("%w: architecture %q is not supported (supported: %s)", ErrConfig, arch, archNames())
	}
	if !slices.Contains(Presets(), p) {
		return nil, fmt.Errorf("%w: preset %q is not one of tiny, small", ErrConfig, p)
	}
	if vocab <= 0 {
		return nil, fmt.Errorf("%w: vocabulary size must be > 0, got %d", ErrConfig, vocab)
	}
	small := p == PresetSmall
	c := &Config{Arch: arch, VocabSize: vocab, MaxPositionEmbeddings: 4096, RMSNormEps: 1e-6, InitializerRange: 0.02,
		HiddenSize: 64, IntermediateSize: 128, NumHiddenLayers: 2, NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 16}
	if small {
		c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = 256, 768, 4, 8, 4, 32
	}
	experts, topK, moeInter := 8, 2, 32
	if small {
		experts, topK, moeInter = 16, 4, 128
	}
	switch arch {
	case Qwen3:
		c.RopeTheta, c.TieWordEmbeddings = 1e6, true
	case Qwen3MoE:
		c.RopeTheta = 1e6
		c.NumExperts, c.NumExpertsPerTok, c.MoEIntermediateSize = experts, topK, moeInter
		c.NormTopKProb, c.DecoderSparseStep = true, 1
	case Llama:
		c.RopeTheta = 500000
		c.Rope = &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}
	case DeepseekV3:
		c.RopeTheta = 10000
		c.Rope = &RopeScaling{Type: "yarn", Factor: 4, OriginalMaxPositionEmbeddings: 1024, BetaFast: 32, BetaSlow: 1, MScale: 1, MScaleAllDim: 1}
		c.NumExperts, c.NumExpertsPerTok, c.MoEIntermediateSize = experts, topK, moeInter
		c.NormTopKProb, c.RoutedScalingFactor, c.NSharedExperts, c.FirstKDenseReplace = true, 2.5, 1, 1
		c.RopeInterleave = true
		c.NumKeyValueHeads = c.NumAttentionHeads
		if small {
			c.QLoraRank, c.KVLoraRank, c.QKNopeHeadDim, c.QKRopeHeadDim, c.VHeadDim = 64, 64, 32, 16, 32
			c.NGroup, c.TopKGroup = 4, 2
		} else {
			c.NumHiddenLayers = 3
			c.QLoraRank, c.KVLoraRank, c.QKNopeHeadDim, c.QKRopeHeadDim, c.VHeadDim = 32, 32, 16, 8, 16
			c.NGroup, c.TopKGroup = 2, 1
		}
		c.HeadDim = c.QKRopeHeadDim
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// InitOptions are departures from transformers' initialisation.
type InitOptions struct {
	// CorrectionBiasStd > 0 draws DeepSeek's e_score_correction_bias
	// from normal(0, CorrectionBiasStd) instead of HF's zeros, so that a
	// random checkpoint exercises the bias (a test that the bias is used
	// for selection, and only for selection, needs it non-zero).
	CorrectionBiasStd float64
}

// Init returns a model of c with transformers' _init_weights
// (modeling_deepseek_v3.py @00b676f8, DeepseekV3PreTrainedModel; the
// other families use PreTrainedModel's same rules): every Linear weight
// and the embedding from normal(0, initializer_range), the embedding's
// padding row (pad_token_id) zero, biases zero, RMSNorm weights 1,
// routers normal(0, initializer_range), e_score_correction_bias zero. It
// is deterministic: tensor i draws from its own PCG stream seeded by
// (seed, i), so the same seed gives the same weights on every platform.
// gen holds the special token ids for generation_config.json.
func Init(c *Config, gen GenerationConfig, seed uint64) (*Model, error) {
	return InitWithOptions(c, gen, seed, InitOptions{})
}

// InitWithOptions is Init with o's departures.
func InitWithOptions(c *Config, gen GenerationConfig, seed uint64, o InitOptions) (*Model, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	w := build(c)
	std := c.InitializerRange
	for i, t := range w.tensors {
		rng := rand.New(rand.NewPCG(seed, uint64(i)+0x9e3779b97f4a7c15))
		d := *t.data
		switch t.kind {
		case kindNorm:
			for j := range d {
				d[j] = 1
			}
		case kindBias:
			clear(d)
		case kindCorr:
			if o.CorrectionBiasStd == 0 {
				clear(d) // +0, as torch.zeros
				continue
			}
			for j := range d {
				d[j] = float32(rng.NormFloat64() * o.CorrectionBiasStd)
			}
		default:
			for j := range d {
				d[j] = float32(rng.NormFloat64() * std)
			}
			if t.kind == kindEmbed && c.PadTokenID != nil && *c.PadTokenID >= 0 && *c.PadTokenID < c.VocabSize {
				clear(d[*c.PadTokenID*c.HiddenSize : (*c.PadTokenID+1)*c.HiddenSize])
			}
		}
		// A checkpoint is BF16: serve exactly what Save writes and Load
		// reads back.
		roundBF16(d)
	}
	return newModel(c, gen, w), nil
}
