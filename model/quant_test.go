package model

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/asyncrl/asyncrl/model/sampler"
	"github.com/asyncrl/asyncrl/weights/quant"
)

// TestQuantizedServesINT4: Quantized replaces the Linear weight matrices
// (layers.*.weight, head.weight) by FakeQuantINT4 of their BF16 rounding
// with the scheme's group, rounds embeddings and biases to BF16, leaves
// the source model alone, and refuses an unknown name.
func TestQuantizedServesINT4(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Layers = 2
	m, _ := New(cfg, 3)
	orig := slices.Clone(m.params)
	for _, tc := range []struct {
		q     Quant
		group int
	}{{QuantINT4G32, 32}, {QuantINT4G128, 128}} {
		qm, err := m.Quantized(tc.q)
		if err != nil {
			t.Fatal(err)
		}
		changed := 0
		for _, ts := range m.tensors {
			src, got := m.params[ts.off:ts.off+ts.n], qm.params[ts.off:ts.off+ts.n]
			if !quantizable(ts) {
				for i, v := range src {
					if got[i] != roundBF16(v) {
						t.Fatalf("%s: %s[%d] = %v, want BF16(%v)", tc.q, ts.name, i, got[i], v)
					}
				}
				continue
			}
			changed++
			want := make([]float32, ts.n)
			for i, v := range src {
				want[i] = roundBF16(v)
			}
			if err := quant.FakeQuantINT4(want, want, ts.shape[0], ts.shape[1], tc.group); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%s: %s is not FakeQuantINT4(BF16(W)) with group %d", tc.q, ts.name, tc.group)
			}
		}
		if changed != cfg.Layers+1 {
			t.Fatalf("%s: %d matrices quantised, want %d", tc.q, changed, cfg.Layers+1)
		}
		// The derived first-layer table follows the quantised weights.
		fresh := qm.Clone()
		fresh.refresh()
		if !slices.Equal(fresh.tab, qm.tab) {
			t.Fatalf("%s: first-layer table not rebuilt", tc.q)
		}
	}
	if !slices.Equal(m.params, orig) {
		t.Fatal("Quantized modified its source")
	}
	if none, err := m.Quantized(QuantNone); err != nil || !slices.Equal(none.params, m.params) {
		t.Fatalf("none: %v", err)
	}
	if _, err := m.Quantized("int3"); !errors.Is(err, ErrConfig) {
		t.Fatalf("unknown quantisation: %v, want ErrConfig", err)
	}
	tc := DefaultTrainerConfig()
	tc.FakeQuant = "fp4"
	if _, err := NewTrainer(m, tc); !errors.Is(err, ErrConfig) {
		t.Fatalf("trainer fake_quant fp4: %v, want ErrConfig", err)
	}
}

// fqFixture: BF16 weights (what the engine loads), a batch sampled from
// the INT4-served copy, a fake-quantising trainer on those weights and a
// dense trainer on the engine's INT4 weights.
func fqFixture(t *testing.T, q Quant) (fq, onServed *Trainer, served *Model, b Batch) {
	t.Helper()
	m, _ := New(DefaultConfig(), 11)
	m.RoundBF16()
	served, err := m.Quantized(q)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultTrainerConfig()
	cfg.FakeQuant = string(q)
	fq, err = NewTrainer(m.Clone(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.FakeQuant = ""
	onServed, _ = NewTrainer(served.Clone(), cfg)
	rng := rand.New(rand.NewPCG(11, 2))
	b = Batch{Sequences: withVersion(rollout(t, served, 8, 8, rng, sampler.DefaultParams()), 0)}
	return fq, onServed, served, b
}

// TestFakeQuantForwardIsINT4Serving: the fake-quantising trainer's
// logprobs are bit-identical to those of the INT4 weights the engine
// serves, its masters are untouched by the pass, and the rollout
// logprobs the engine reported agree with them to float32 rounding.
func TestFakeQuantForwardIsINT4Serving(t *testing.T) {
	fq, onServed, _, b := fqFixture(t, QuantINT4G32)
	masters := slices.Clone(fq.Model().params)
	got, err := fq.Logprobs(b)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := onServed.Logprobs(b)
	for i := range got {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("sequence %d: fake-quant logprobs %v, served INT4 %v", i, got[i], want[i])
		}
	}
	if !slices.Equal(fq.Model().params, masters) || fq.fqIn {
		t.Fatal("Logprobs left fake-quantised weights in the masters")
	}
	rollouts := make([][]float32, len(b.Sequences))
	for i, s := range b.Sequences {
		rollouts[i] = s.RolloutLogprobs
	}
	if d, _ := meanAbsDiff(b.Sequences, got, rollouts, -1); d > 1e-6 {
		t.Fatalf("fake-quant trainer vs INT4 engine: mean |Δlogprob| %g", d)
	}
}

// TestFakeQuantSTEGradient: the straight-through gradient is the dense
// gradient evaluated at FakeQuant(W) (bit for bit), which differs from
// the dense gradient at W; the AdamW step applies it to the FP32 masters,
// which stay unquantised; a checkpoint and the serving copy carry the
// masters even while a step is open.
func TestFakeQuantSTEGradient(t *testing.T) {
	fq, onServed, served, b := fqFixture(t, QuantINT4G128)
	masters := slices.Clone(fq.Model().params)
	_, g, err := fq.lossGrad(b)
	if err != nil {
		t.Fatal(err)
	}
	g = slices.Clone(g)
	_, want, _ := onServed.lossGrad(b)
	if !slices.Equal(g, want) {
		t.Fatal("STE gradient differs from the dense gradient at FakeQuant(W)")
	}
	dense, _ := NewTrainer(fq.Model().Clone(), DefaultTrainerConfig())
	_, gd, _ := dense.lossGrad(b)
	if slices.Equal(g, gd) {
		t.Fatal("the gradient at FakeQuant(W) equals the one at W: quantisation had no effect")
	}

	// While a step is open the model holds the INT4 weights, the serving
	// copy the masters.
	tot, _ := fq.Totals(b)
	if err := fq.Begin(tot); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fq.Model().params, served.params) {
		t.Fatal("open step: the model does not hold the served INT4 weights")
	}
	if sc := fq.ServingCopy(); !slices.Equal(sc.params, masters) { // masters are BF16 already
		t.Fatal("open step: ServingCopy is not the masters")
	}
	if err := fq.Accumulate(b); err != nil {
		t.Fatal(err)
	}
	st, err := fq.Apply()
	if err != nil {
		t.Fatal(err)
	}
	// First AdamW step (no weight decay): w − lr·ĝ/(|ĝ| + eps), ĝ the
	// clipped gradient, from the masters, not from FakeQuant(W).
	c := fq.Config()
	scale := 1.0
	if st.GradNorm > c.MaxGradNorm {
		scale = c.MaxGradNorm / (st.GradNorm + 1e-6)
	}
	moved := 0
	for i, w := range fq.Model().params {
		gi := g[i] * scale
		m1 := (1 - c.Beta1) * gi
		v1 := (1 - c.Beta2) * gi * gi
		exp := float64(masters[i]) - c.LR*(m1/(1-c.Beta1))/(math.Sqrt(v1/(1-c.Beta2))+c.Eps)
		if math.Abs(float64(w)-exp) > 1e-6*math.Max(1, math.Abs(exp)) {
			t.Fatalf("param %d after the step: %v, want %v", i, w, exp)
		}
		if w != served.params[i] {
			moved++
		}
	}
	if moved < len(masters)/2 {
		t.Fatalf("only %d of %d masters differ from the INT4 grid: masters were quantised", moved, len(masters))
	}
}

// TestMismatchINT4FakeQuant: tokens sampled from an INT4 engine; the
// dense trainer's train–inference mismatch is the quantisation's, the
// fake-quantising trainer's is float32 rounding — by construction, as the
// trainer's quantiser is the engine's (the point, and what
// BENCHMARKS.md measures over a training run).
func TestMismatchINT4FakeQuant(t *testing.T) {
	for _, q := range []Quant{QuantINT4G32, QuantINT4G128} {
		fq, _, _, b := fqFixture(t, q)
		dense, _ := NewTrainer(fq.Model().Clone(), DefaultTrainerConfig())
		sf, _, err := fq.lossGrad(b)
		if err != nil {
			t.Fatal(err)
		}
		sd, _, _ := dense.lossGrad(b)
		t.Logf("%s: mismatch dense trainer %.3g (IS ratio %.4f), fake-quant trainer %.3g (IS ratio %.6f)",
			q, sd.Mismatch, sd.ISRatio, sf.Mismatch, sf.ISRatio)
		if !(sf.Mismatch < 1e-6) || !(sd.Mismatch > 100*sf.Mismatch) || math.Abs(sf.ISRatio-1) > 1e-5 {
			t.Errorf("%s: mismatch fake-quant %.3g vs dense %.3g, IS ratio %v", q, sf.Mismatch, sd.Mismatch, sf.ISRatio)
		}
	}
}

// TestQuantizedFP8IsPublishedFP8: an engine quantising a BF16 checkpoint
// to fp8 or mxfp8 on load serves what it would load from the publisher's
// quantised checkpoint of the same weights (QuantizedCopy).
func TestQuantizedFP8IsPublishedFP8(t *testing.T) {
	m, _ := New(DefaultConfig(), 4)
	m.RoundBF16()
	for _, q := range []Quant{QuantFP8, QuantMXFP8} {
		s, err := quant.Lookup(string(q))
		if err != nil {
			t.Fatal(err)
		}
		want, _, err := m.QuantizedCopy(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.Quantized(q)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.params, want.params) || slices.Equal(got.params, m.params) {
			t.Fatalf("%s: Quantized differs from QuantizedCopy (or changed nothing)", q)
		}
	}
}

// moeQuantModel is a small mixture with non-zero biases (so quantising
// one would show) and Hidden 24, not a multiple of 128: an FP8 block over
// the stacked experts would span two of them.
func moeQuantModel(t *testing.T) (*Model, Config) {
	t.Helper()
	cfg := Config{VocabSize: 98, Window: 4, EmbedDim: 8, Hidden: 24, Layers: 2, MaxSeqLen: 64, Experts: 4, TopK: 2}
	m, err := New(cfg, 5)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for l := range cfg.Layers {
		for i := m.bOff[l]; i < m.bOff[l]+cfg.Experts*cfg.Hidden; i++ {
			m.params[i] = float32(rng.NormFloat64())
		}
	}
	m.refresh()
	return m, cfg
}

// TestQuantizedMoE: in a mixture of experts the quantised tensors are the
// experts' weights, each expert's [Hidden, in] matrix on its own, and the
// head's; the routers' weights (vLLM's gate stays unquantised) and the
// experts' biases, 2-D [Experts, Hidden], stay BF16 like every bias. INT4
// and FP8 alike; the FP8 checkpoint (3-D codes and scales) loads as
// QuantizedCopy serves.
func TestQuantizedMoE(t *testing.T) {
	m, cfg := moeQuantModel(t)
	want := []string{"layers.0.experts.weight", "layers.1.experts.weight", "head.weight"}
	if got := m.QuantizedTensors(); !slices.Equal(got, want) {
		t.Fatalf("QuantizedTensors %v, want %v", got, want)
	}
	fp8, _ := quant.Lookup("fp8")
	for _, q := range []Quant{QuantINT4G32, QuantFP8} {
		qm, err := m.Quantized(q)
		if err != nil {
			t.Fatal(err)
		}
		for _, ts := range m.tensors {
			src, got := m.params[ts.off:ts.off+ts.n], qm.params[ts.off:ts.off+ts.n]
			bf := make([]float32, ts.n)
			for i, v := range src {
				bf[i] = roundBF16(v)
			}
			if !slices.Contains(want, ts.name) {
				if !slices.Equal(got, bf) {
					t.Fatalf("%s: %s is not served BF16", q, ts.name)
				}
				continue
			}
			n, rows, cols := ts.matrices()
			for e := range n { // each expert quantised on its own
				mat, rc := bf[e*rows*cols:(e+1)*rows*cols], rows*cols
				exp := make([]float32, rc)
				if q == QuantFP8 {
					w, sc, _, err := fp8.Quantize(ts.name, rows, cols, mat)
					if err != nil {
						t.Fatal(err)
					}
					if exp, err = fp8.Dequantize(w, sc, nil); err != nil {
						t.Fatal(err)
					}
				} else if err := quant.FakeQuantINT4(exp, mat, rows, cols, 32); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got[e*rc:(e+1)*rc], exp) {
					t.Fatalf("%s: %s matrix %d is not its own quantisation", q, ts.name, e)
				}
				if slices.Equal(exp, mat) {
					t.Fatalf("%s: %s matrix %d unchanged by quantisation", q, ts.name, e)
				}
			}
		}
	}
	dir := t.TempDir()
	if _, err := m.SaveServingQuantized(dir, fp8, nil); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadServing(dir)
	if err != nil {
		t.Fatal(err)
	}
	cp, _, err := m.QuantizedCopy(fp8)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(loaded.params, cp.params) {
		t.Fatal("the FP8 checkpoint loads other weights than QuantizedCopy serves")
	}
	if _, _, e := loaded.RouteShape(); e != cfg.Experts {
		t.Fatalf("loaded %d experts", e)
	}
}
