package transformer

import (
	"math"
	"math/rand/v2"
	"testing"
)

// variant returns a model over m's weights with the config edited and
// the weights' layers copied (so layer fields can be edited) — the same
// checkpoint computed with one detail wrong.
func variant(m *Model, editCfg func(*Config), editLayer func(*layer)) *Model {
	c := m.cfg
	if editCfg != nil {
		editCfg(&c)
	}
	w := *m.w
	w.layers = append([]layer(nil), m.w.layers...)
	for i := range w.layers {
		if editLayer != nil {
			editLayer(&w.layers[i])
		}
	}
	return newModel(&c, m.gen, &w)
}

// logprobSpread is the largest |Δ log_softmax| between two models over a
// few sequences: what a logprob cross-check compares.
func logprobSpread(a, b *Model) float64 {
	rng := rand.New(rand.NewPCG(5, 5))
	var d float64
	for range 4 {
		toks := randTokens(rng, 40, a.VocabSize())
		la, lb := logSoftmax(logitsOf(a, toks)), logSoftmax(logitsOf(b, toks))
		d = max(d, maxAbsDiff(la, lb))
	}
	return d
}

func logSoftmax(x []float32) []float32 {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = max(mx, float64(v))
	}
	var s float64
	for _, v := range x {
		s += math.Exp(float64(v) - mx)
	}
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(float64(v) - mx - math.Log(s))
	}
	return out
}

// TestWrongDetailsChangeLogprobs: each implementation detail a
// cross-check must catch changes the logprobs of a random tiny model by
// far more than the BF16 rounding bound the cross-check allows (the
// weights are BF16 already; both sides compute in float32), so a Go or
// torch side that gets it wrong fails that check. The random weights are
// scaled up (std 0.02 gives near-uniform logits) so the details matter as
// they do in a trained model.
func TestWrongDetailsChangeLogprobs(t *testing.T) {
	const bound = 1e-3 // well above float32 noise, well below these effects
	sharpen := func(m *Model) *Model {
		for _, tt := range m.w.tensors {
			if tt.kind == kindProj || tt.kind == kindEmbed || tt.kind == kindHead || tt.kind == kindRouter {
				for i := range *tt.data {
					(*tt.data)[i] *= 8
				}
			}
		}
		return m
	}
	cases := []struct {
		name  string
		arch  Arch
		cfg   func(*Config)
		layer func(*layer)
		scale float32
	}{
		{name: "rope base", arch: Qwen3, cfg: func(c *Config) { c.RopeTheta = 10000 }},
		{name: "q/k-norm off", arch: Qwen3, layer: func(l *layer) { l.attn.qNorm, l.attn.kNorm = nil, nil }},
		{name: "llama3 rope scaling ignored", arch: Llama, cfg: func(c *Config) { c.Rope = nil }},
		{name: "attention scale", arch: Llama, scale: 0.5},
		{name: "moe top-k not renormalised", arch: Qwen3MoE, cfg: func(c *Config) { c.NormTopKProb = false }},
		{name: "router bias ignored", arch: DeepseekV3, layer: func(l *layer) {
			if l.moe != nil {
				m := *l.moe
				m.corr = make([]float32, len(m.corr))
				l.moe = &m
			}
		}},
		{name: "routed scaling factor", arch: DeepseekV3, cfg: func(c *Config) { c.RoutedScalingFactor = 1 }},
		{name: "yarn mscale", arch: DeepseekV3, cfg: func(c *Config) { r := *c.Rope; r.MScaleAllDim = 0; c.Rope = &r }},
		{name: "rope not interleaved", arch: DeepseekV3, cfg: func(c *Config) { c.RopeInterleave = false }},
		{name: "shared expert dropped", arch: DeepseekV3, layer: func(l *layer) {
			if l.moe != nil {
				m := *l.moe
				m.shared = &mlp{gate: m.shared.gate, up: m.shared.up, down: linear{w: make([]float32, len(m.shared.down.w)), out: m.shared.down.out, in: m.shared.down.in}}
				l.moe = &m
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := sharpen(tinyModel(t, tc.arch, 97, 11))
			v := variant(m, tc.cfg, tc.layer)
			if tc.scale != 0 {
				v.scale *= tc.scale
			}
			if d := logprobSpread(m, m); d != 0 {
				t.Fatalf("the same model differs from itself by %g", d)
			}
			d := logprobSpread(m, v)
			t.Logf("max |Δ logprob| = %.4g", d)
			if d < bound {
				t.Fatalf("getting %q wrong moves logprobs by only %g (< %g): a cross-check would not catch it", tc.name, d, bound)
			}
		})
	}
}
