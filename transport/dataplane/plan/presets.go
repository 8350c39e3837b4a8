package plan

import (
	"fmt"
	"strconv"
	"strings"
)

// Preset is a published model with the layouts its weight sync was
// measured on (reference/workloads.md).
type Preset struct {
	// Name is the model name.
	Name string
	// Model is a synthetic tensor list from the public config: every
	// weight matrix, norm and router with its real shape, BF16.
	Model *Model
	// Train and Infer are the published (or, where only GPU counts were
	// published, plausible) layouts.
	Train, Infer Layout
	// Published is the reference figure for the sync.
	Published string
}

// Presets returns the three reference models and the built-in policy.
func Presets() []Preset {
	return []Preset{
		{
			Name:  "Qwen3-235B-A22B",
			Model: Qwen3_235B(),
			// 2 trainer nodes tp4/pp2/ep8 (16 GPUs, so dp2); 2 inference nodes dp16/ep16.
			Train:     Layout{TP: 4, PP: 2, DP: 2, EP: 8},
			Infer:     Layout{TP: 1, PP: 1, DP: 16, EP: 16},
			Published: "NCCL broadcast 64.72 s vs sharded NIXL pull 3.54 s (SkyRL)",
		},
		{
			Name:  "Kimi-K2",
			Model: KimiK2(),
			// 32 trainer nodes (256 GPUs) and 16 inference nodes (128 GPUs).
			Train:     Layout{TP: 8, PP: 16, DP: 2, EP: 16},
			Infer:     Layout{TP: 8, PP: 1, DP: 16, EP: 128},
			Published: "sharded BF16 transfer 7.53 s on 48 8×H100 nodes",
		},
		{
			Name:  "GLM-4.5",
			Model: GLM45(),
			// 4 trainer and 4 inference nodes.
			Train:     Layout{TP: 4, PP: 4, DP: 2, EP: 8},
			Infer:     Layout{TP: 8, PP: 1, DP: 4, EP: 32},
			Published: "BF16 sync 48 s (slime)",
		},
		{
			Name:  "builtin",
			Model: BuiltinPolicy(98, 16, 16, 128, 1),
			// One trainer rank, two engines: what `asyncrl run` starts.
			Train:     Layout{TP: 1, PP: 1, DP: 1, EP: 1},
			Infer:     Layout{TP: 1, PP: 1, DP: 2, EP: 1},
			Published: "none (a ~188 KB FP32 checkpoint; syncs are latency, not bandwidth)",
		},
	}
}

// PresetByName finds a preset by name, ignoring case ("qwen3-235b-a22b",
// "kimi-k2", "glm-4.5", "builtin").
func PresetByName(name string) (Preset, error) {
	var names []string
	for _, p := range Presets() {
		if strings.EqualFold(p.Name, name) {
			return p, nil
		}
		names = append(names, strings.ToLower(p.Name))
	}
	return Preset{}, fmt.Errorf("%w: unknown model %q (presets: %s)", ErrBadLayout, name, strings.Join(names, ", "))
}

// BuiltinPolicy is the built-in policy model (package model) as a tensor
// list: a vocab×embedDim embedding, layers tanh layers (the first reads
// window embeddings), a vocab×hidden head with bias; FP32 like the model.
// The arguments are policy.Config's VocabSize, Window, EmbedDim, Hidden and
// Layers (this core cannot import the policy library; the CLI test checks
// the defaults agree). The vocabulary (98) splits by no TP, so the
// embedding and head bias are replicated and the head is row-parallel.
func BuiltinPolicy(vocab, window, embedDim, hidden, layers int) *Model {
	b := &builder{m: &Model{Name: "builtin", Layers: layers}}
	add := func(name string, layer, tpDim int, shape ...int64) {
		b.m.Tensors = append(b.m.Tensors, Tensor{Name: name, Shape: shape, DType: FP32, Layer: layer, TPDim: tpDim, Expert: -1})
	}
	add("embed.weight", LayerEmbed, repl, int64(vocab), int64(embedDim))
	in := int64(window * embedDim)
	for l := range layers {
		add(fmt.Sprintf("layers.%d.weight", l), l, col, int64(hidden), in)
		add(fmt.Sprintf("layers.%d.bias", l), l, col, int64(hidden))
		in = int64(hidden)
	}
	add("head.weight", LayerHead, row, int64(vocab), int64(hidden))
	add("head.bias", LayerHead, repl, int64(vocab))
	return b.m
}

// builder appends tensors.
type builder struct{ m *Model }

func (b *builder) add(name string, layer, tpDim, expert int, shape ...int64) {
	b.m.Tensors = append(b.m.Tensors, Tensor{Name: name, Shape: shape, DType: BF16, Layer: layer, TPDim: tpDim, Expert: expert})
}

// Column-parallel weights split their output dim (0); row-parallel ones
// their input dim (1); norms and routers are replicated.
const (
	col  = 0
	row  = 1
	repl = -1
)

func (b *builder) mlp(prefix string, layer, expert int, hidden, inter int64) {
	tp := func(d int) int {
		if expert >= 0 {
			return repl // routed experts are split by EP, never TP
		}
		return d
	}
	b.add(prefix+"gate_proj.weight", layer, tp(col), expert, inter, hidden)
	b.add(prefix+"up_proj.weight", layer, tp(col), expert, inter, hidden)
	b.add(prefix+"down_proj.weight", layer, tp(row), expert, hidden, inter)
}

func (b *builder) experts(l, n int, hidden, inter int64) {
	for e := range n {
		b.mlp("model.layers."+strconv.Itoa(l)+".mlp.experts."+strconv.Itoa(e)+".", l, e, hidden, inter)
	}
}

func (b *builder) ends(vocab, hidden int64) {
	b.m.Tensors = append([]Tensor{{Name: "model.embed_tokens.weight", Shape: []int64{vocab, hidden}, DType: BF16, Layer: LayerEmbed, TPDim: col, Expert: -1}}, b.m.Tensors...)
	b.add("model.norm.weight", LayerHead, repl, -1, hidden)
	b.add("lm_head.weight", LayerHead, col, -1, vocab, hidden)
}

// Qwen3_235B is Qwen3-235B-A22B: 94 layers, 128 experts (top-8), hidden
// 4096, GQA 64/4 heads of 128, expert FFN 1536, vocab 151936 (~470 GB BF16).
func Qwen3_235B() *Model {
	const hidden, experts, layers = 4096, 128, 94
	b := &builder{m: &Model{Name: "Qwen3-235B-A22B", Layers: layers, Experts: experts}}
	for l := range layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		b.add(p+"input_layernorm.weight", l, repl, -1, hidden)
		b.add(p+"self_attn.q_proj.weight", l, col, -1, 64*128, hidden)
		b.add(p+"self_attn.k_proj.weight", l, col, -1, 4*128, hidden)
		b.add(p+"self_attn.v_proj.weight", l, col, -1, 4*128, hidden)
		b.add(p+"self_attn.o_proj.weight", l, row, -1, hidden, 64*128)
		b.add(p+"self_attn.q_norm.weight", l, repl, -1, 128)
		b.add(p+"self_attn.k_norm.weight", l, repl, -1, 128)
		b.add(p+"post_attention_layernorm.weight", l, repl, -1, hidden)
		b.add(p+"mlp.gate.weight", l, repl, -1, experts, hidden)
		b.experts(l, experts, hidden, 1536)
	}
	b.ends(151936, hidden)
	return b.m
}

// KimiK2 is Kimi K2: 61 layers (the first dense, FFN 18432), 384 experts
// (top-8) plus one shared expert of FFN 2048, hidden 7168, MLA attention
// (64 heads, q rank 1536, kv rank 512, qk 128+64, v 128), vocab 163840
// (~1T parameters, ~2 TB BF16).
func KimiK2() *Model {
	const hidden, experts, layers = 7168, 384, 61
	b := &builder{m: &Model{Name: "Kimi-K2", Layers: layers, Experts: experts}}
	for l := range layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		b.add(p+"input_layernorm.weight", l, repl, -1, hidden)
		b.add(p+"self_attn.q_a_proj.weight", l, repl, -1, 1536, hidden)
		b.add(p+"self_attn.q_a_layernorm.weight", l, repl, -1, 1536)
		b.add(p+"self_attn.q_b_proj.weight", l, col, -1, 64*(128+64), 1536)
		b.add(p+"self_attn.kv_a_proj_with_mqa.weight", l, repl, -1, 512+64, hidden)
		b.add(p+"self_attn.kv_a_layernorm.weight", l, repl, -1, 512)
		b.add(p+"self_attn.kv_b_proj.weight", l, col, -1, 64*(128+128), 512)
		b.add(p+"self_attn.o_proj.weight", l, row, -1, hidden, 64*128)
		b.add(p+"post_attention_layernorm.weight", l, repl, -1, hidden)
		if l == 0 {
			b.mlp(p+"mlp.", l, -1, hidden, 18432)
			continue
		}
		b.add(p+"mlp.gate.weight", l, repl, -1, experts, hidden)
		b.add(p+"mlp.gate.e_score_correction_bias", l, repl, -1, experts)
		b.mlp(p+"mlp.shared_experts.", l, -1, hidden, 2048)
		b.experts(l, experts, hidden, 2048)
	}
	b.ends(163840, hidden)
	return b.m
}

// GLM45 is GLM-4.5: 92 layers (the first 3 dense, FFN 12288), 160 experts
// (top-8) plus one shared expert of FFN 1536, hidden 5120, GQA 96/8 heads
// of 128 with q/k/v biases, vocab 151552 (~355B parameters).
func GLM45() *Model {
	const hidden, experts, layers = 5120, 160, 92
	b := &builder{m: &Model{Name: "GLM-4.5", Layers: layers, Experts: experts}}
	for l := range layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		b.add(p+"input_layernorm.weight", l, repl, -1, hidden)
		for _, qkv := range []struct {
			n     string
			heads int64
		}{{"q", 96}, {"k", 8}, {"v", 8}} {
			b.add(p+"self_attn."+qkv.n+"_proj.weight", l, col, -1, qkv.heads*128, hidden)
			b.add(p+"self_attn."+qkv.n+"_proj.bias", l, col, -1, qkv.heads*128)
		}
		b.add(p+"self_attn.o_proj.weight", l, row, -1, hidden, 96*128)
		b.add(p+"post_attention_layernorm.weight", l, repl, -1, hidden)
		if l < 3 {
			b.mlp(p+"mlp.", l, -1, hidden, 12288)
			continue
		}
		b.add(p+"mlp.gate.weight", l, repl, -1, experts, hidden)
		b.add(p+"mlp.gate.e_score_correction_bias", l, repl, -1, experts)
		b.mlp(p+"mlp.shared_experts.", l, -1, hidden, 1536)
		b.experts(l, experts, hidden, 1536)
	}
	b.ends(151552, hidden)
	return b.m
}
