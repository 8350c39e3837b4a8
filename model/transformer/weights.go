package transformer

import (
	"fmt"
	"slices"
)

// kind classifies a tensor for quantisation and initialisation.
type kind uint8

const (
	kindProj   kind = iota // a Linear weight of attention, MLP, experts (quantised)
	kindBias               // a Linear bias
	kindNorm               // an RMSNorm weight (init 1)
	kindEmbed              // model.embed_tokens.weight
	kindHead               // lm_head.weight
	kindRouter             // mlp.gate.weight (router)
	kindCorr               // mlp.gate.e_score_correction_bias (init 0)
)

// tensor is one named parameter: its HF name, shape and the float32 slice
// the model computes with.
type tensor struct {
	name  string
	shape []int
	data  *[]float32
	kind  kind
	// lin is the Linear layer a .weight tensor belongs to (nil for the
	// rest): what a LoRA adapter's module name resolves to (adapter.go).
	lin *linear
}

func (t tensor) numel() int {
	n := 1
	for _, s := range t.shape {
		n *= s
	}
	return n
}

// linear is y = x·Wᵀ (+ b), W [out, in] row-major as HF stores it.
type linear struct {
	w       []float32
	b       []float32 // nil without bias
	out, in int
	// wt is W transposed and packed in 16-column panels (packPanels),
	// what the matmul kernels read: computed once by newModel (weights
	// are immutable after).
	wt []float32
}

type mlp struct{ gate, up, down linear }

type attention struct {
	// GQA (qwen3, qwen3_moe, llama).
	q, k, v, o   linear
	qNorm, kNorm []float32 // qwen3 q_norm / k_norm over head_dim
	// MLA (deepseek_v3): q_proj, or q_a_proj → q_a_layernorm → q_b_proj;
	// kv_a_proj_with_mqa → (kv_a_layernorm on its first kv_lora_rank) →
	// kv_b_proj.
	qA, qB, kvA, kvB linear
	qANorm, kvANorm  []float32
}

type moeLayer struct {
	router  linear    // mlp.gate [experts, hidden]
	corr    []float32 // deepseek e_score_correction_bias [experts]
	experts []mlp
	shared  *mlp // deepseek shared_experts
}

type layer struct {
	inNorm, postNorm []float32
	attn             attention
	mlp              *mlp // dense feed-forward
	moe              *moeLayer
}

// weights is the parameter set of a Config, with its tensors in HF order.
type weights struct {
	embed, norm []float32
	head        linear // lm_head, or the embedding when tied
	layers      []layer
	tensors     []tensor
}

// build allocates every parameter of c (zeros) and lists the tensors.
func build(c *Config) *weights {
	w := &weights{layers: make([]layer, c.NumHiddenLayers)}
	w.layout(c, true)
	return w
}

// layout lists w's tensors in HF order. With alloc it first creates every
// layer part and parameter (zeros); without, w already holds them (a
// clone: see clone) and only the list is rebuilt, pointing into w.
func (w *weights) layout(c *Config, alloc bool) {
	w.tensors = w.tensors[:0]
	add := func(name string, k kind, dst *[]float32, shape ...int) *tensor {
		t := tensor{name: name, shape: shape, data: dst, kind: k}
		if alloc {
			*dst = make([]float32, t.numel())
		}
		w.tensors = append(w.tensors, t)
		return &w.tensors[len(w.tensors)-1]
	}
	lin := func(name string, l *linear, out, in int, bias bool) {
		l.out, l.in = out, in
		kd := kindProj
		if name == "lm_head" {
			kd = kindHead
		}
		add(name+".weight", kd, &l.w, out, in).lin = l
		if bias {
			add(name+".bias", kindBias, &l.b, out)
		}
	}
	mk := func(prefix string, m *mlp, inter int, bias bool) {
		lin(prefix+".gate_proj", &m.gate, inter, c.HiddenSize, bias)
		lin(prefix+".up_proj", &m.up, inter, c.HiddenSize, bias)
		lin(prefix+".down_proj", &m.down, c.HiddenSize, inter, bias)
	}
	add("model.embed_tokens.weight", kindEmbed, &w.embed, c.VocabSize, c.HiddenSize)
	for i := range w.layers {
		L := &w.layers[i]
		p := fmt.Sprintf("model.layers.%d", i)
		add(p+".input_layernorm.weight", kindNorm, &L.inNorm, c.HiddenSize)
		a := &L.attn
		if c.MLA() {
			qk := c.QKHeadDim()
			if c.QLoraRank > 0 {
				lin(p+".self_attn.q_a_proj", &a.qA, c.QLoraRank, c.HiddenSize, c.AttentionBias)
				add(p+".self_attn.q_a_layernorm.weight", kindNorm, &a.qANorm, c.QLoraRank)
				lin(p+".self_attn.q_b_proj", &a.qB, c.NumAttentionHeads*qk, c.QLoraRank, false)
			} else {
				lin(p+".self_attn.q_proj", &a.q, c.NumAttentionHeads*qk, c.HiddenSize, false)
			}
			lin(p+".self_attn.kv_a_proj_with_mqa", &a.kvA, c.KVLoraRank+c.QKRopeHeadDim, c.HiddenSize, c.AttentionBias)
			add(p+".self_attn.kv_a_layernorm.weight", kindNorm, &a.kvANorm, c.KVLoraRank)
			lin(p+".self_attn.kv_b_proj", &a.kvB, c.NumAttentionHeads*(c.QKNopeHeadDim+c.VHeadDim), c.KVLoraRank, false)
			lin(p+".self_attn.o_proj", &a.o, c.HiddenSize, c.NumAttentionHeads*c.VHeadDim, c.AttentionBias)
		} else {
			hd := c.HeadDim
			lin(p+".self_attn.q_proj", &a.q, c.NumAttentionHeads*hd, c.HiddenSize, c.AttentionBias)
			lin(p+".self_attn.k_proj", &a.k, c.NumKeyValueHeads*hd, c.HiddenSize, c.AttentionBias)
			lin(p+".self_attn.v_proj", &a.v, c.NumKeyValueHeads*hd, c.HiddenSize, c.AttentionBias)
			// Qwen3's o_proj has a bias when attention_bias (Qwen3Attention);
			// so has Llama's.
			lin(p+".self_attn.o_proj", &a.o, c.HiddenSize, c.NumAttentionHeads*hd, c.AttentionBias)
			if c.Arch == Qwen3 || c.Arch == Qwen3MoE {
				add(p+".self_attn.q_norm.weight", kindNorm, &a.qNorm, hd)
				add(p+".self_attn.k_norm.weight", kindNorm, &a.kNorm, hd)
			}
		}
		add(p+".post_attention_layernorm.weight", kindNorm, &L.postNorm, c.HiddenSize)
		if !c.IsMoELayer(i) {
			if alloc {
				L.mlp = &mlp{}
			}
			mk(p+".mlp", L.mlp, c.IntermediateSize, c.MLPBias)
			continue
		}
		if alloc {
			L.moe = &moeLayer{experts: make([]mlp, c.NumExperts)}
			if c.Arch == DeepseekV3 {
				L.moe.shared = &mlp{}
			}
		}
		m := L.moe
		m.router.out, m.router.in = c.NumExperts, c.HiddenSize
		add(p+".mlp.gate.weight", kindRouter, &m.router.w, c.NumExperts, c.HiddenSize)
		if c.Arch == DeepseekV3 {
			// A persistent buffer of DeepseekV3TopkRouter, saved with the
			// weights.
			add(p+".mlp.gate.e_score_correction_bias", kindCorr, &m.corr, c.NumExperts)
		}
		for e := range m.experts {
			mk(fmt.Sprintf("%s.mlp.experts.%d", p, e), &m.experts[e], c.MoEIntermediateSize, false)
		}
		if m.shared != nil {
			mk(p+".mlp.shared_experts", m.shared, c.MoEIntermediateSize*c.NSharedExperts, false)
		}
	}
	add("model.norm.weight", kindNorm, &w.norm, c.HiddenSize)
	if c.TieWordEmbeddings {
		if alloc {
			w.head = linear{w: w.embed, out: c.VocabSize, in: c.HiddenSize}
		}
	} else {
		lin("lm_head", &w.head, c.VocabSize, c.HiddenSize, false)
	}
}

// clone returns a copy of w that shares every parameter slice (and every
// packed transpose) with w but owns its structure, so replacing one
// Linear's w and wt in the copy leaves w unchanged. Its tensor list
// points into the copy.
func (w *weights) clone(c *Config) *weights {
	n := &weights{embed: w.embed, norm: w.norm, head: w.head, layers: slices.Clone(w.layers)}
	for i := range n.layers {
		L := &n.layers[i]
		if L.mlp != nil {
			m := *L.mlp
			L.mlp = &m
		}
		if L.moe != nil {
			m := *L.moe
			m.experts = slices.Clone(m.experts)
			if m.shared != nil {
				s := *m.shared
				m.shared = &s
			}
			L.moe = &m
		}
	}
	n.layout(c, false)
	return n
}

// linears lists every Linear layer (lm_head last).
func (w *weights) linears() []*linear {
	var out []*linear
	m := func(f *mlp) { out = append(out, &f.gate, &f.up, &f.down) }
	for i := range w.layers {
		L := &w.layers[i]
		a := &L.attn
		for _, l := range []*linear{&a.q, &a.k, &a.v, &a.o, &a.qA, &a.qB, &a.kvA, &a.kvB} {
			if l.w != nil {
				out = append(out, l)
			}
		}
		if L.mlp != nil {
			m(L.mlp)
		}
		if L.moe != nil {
			out = append(out, &L.moe.router)
			for e := range L.moe.experts {
				m(&L.moe.experts[e])
			}
			if L.moe.shared != nil {
				m(L.moe.shared)
			}
		}
	}
	return append(out, &w.head)
}

// transpose fills every Linear's wt (packPanels of w).
func (w *weights) transpose() {
	for _, l := range w.linears() {
		l.wt = packPanels(l.w, l.out, l.in)
	}
}

// byName returns the tensor called name.
func (w *weights) byName(name string) (tensor, bool) {
	for _, t := range w.tensors {
		if t.name == name {
			return t, true
		}
	}
	return tensor{}, false
}

// numParams counts the parameters (a tied lm_head once).
func (w *weights) numParams() int64 {
	var n int64
	for _, t := range w.tensors {
		n += int64(t.numel())
	}
	return n
}
