package model

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/asyncrl/asyncrl/model/sampler"
)

// mixedBatch is a mini-batch with sequences of different lengths (so the
// reductions' denominators differ per microbatch), a context token inside
// a generation (loss mask 0 mid-sequence) and support sets.
func mixedBatch(t testing.TB, m *Model, temp float64) Batch {
	rng := rand.New(rand.NewPCG(3, 9))
	p := sampler.Params{Temperature: temp, TopP: 1, TopK: 4}
	var seqs []Sequence
	for _, gen := range []int{1, 5, 2, 7, 3, 4} {
		seqs = append(seqs, rollout(t, m, 1, gen, rng, p)...)
	}
	seqs[3].LossMask[5] = 0
	return Batch{Sequences: seqs}
}

func accTrainer(t testing.TB, mod func(*TrainerConfig)) *Trainer {
	m, err := New(tinyConfig(), 5)
	if err != nil {
		t.Fatal(err)
	}
	for i := m.headW; i < m.headB; i++ {
		m.params[i] *= 20 // logits that vary, so ratios and clipping matter
	}
	m.refresh()
	cfg := DefaultTrainerConfig()
	mod(&cfg)
	tr, err := NewTrainer(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// accumulateSplit runs Begin + Accumulate over micro (a padding microbatch
// where a list is empty) and returns the pending statistics and a copy of
// the accumulated gradient, leaving no step open.
func accumulateSplit(t interface{ Fatal(...any) }, tr *Trainer, b Batch, micro [][]int) (StepStats, []float64) {
	tot, err := tr.Totals(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Begin(tot); err != nil {
		t.Fatal(err)
	}
	defer tr.Discard()
	for _, idx := range micro {
		var mb Batch
		for _, i := range idx {
			mb.Sequences = append(mb.Sequences, b.Sequences[i])
		}
		if len(idx) == 0 {
			mb.Sequences = []Sequence{paddingSeq()}
		}
		if err := tr.Accumulate(mb); err != nil {
			t.Fatal(err)
		}
	}
	return tr.pend.stats(), slices.Clone(tr.gradient())
}

func paddingSeq() Sequence {
	return Sequence{Tokens: []int32{0}, LossMask: []uint8{0}, RolloutLogprobs: []float32{0}}
}

// TestAccumulationEqualsWholeBatch is a property test: for every loss
// reduction, with and without support renormalisation, KL and entropy, and
// 1 or 3 workers, accumulating any split of the mini-batch (any order, any
// sizes, padding microbatches anywhere) gives the whole batch's gradient
// and statistics up to float64 summation order.
func TestAccumulationEqualsWholeBatch(t *testing.T) {
	cases := []struct {
		name string
		mod  func(*TrainerConfig)
	}{
		{"token_mean", func(c *TrainerConfig) {}},
		{"sequence_mean+kl", func(c *TrainerConfig) { c.Reduction, c.KLCoef = SequenceMean, 0.2 }},
		{"seq_mean_token_sum_norm+support+T0.7", func(c *TrainerConfig) {
			c.Reduction, c.SupportNorm, c.Temperature = SeqMeanTokenSumNorm, true, 0.7
		}},
		{"seq_mean_token_sum_norm+fixed_len", func(c *TrainerConfig) {
			c.Reduction, c.ReductionMaxSeqLen = SeqMeanTokenSumNorm, 16
		}},
	}
	for _, tc := range cases {
		for _, workers := range []int{1, 3} {
			t.Run(tc.name+"/workers="+string(rune('0'+workers)), func(t *testing.T) {
				tr := accTrainer(t, func(c *TrainerConfig) { tc.mod(c); c.Workers = workers })
				b := mixedBatch(t, tr.model, tr.cfg.Temperature)
				// Rollout logprobs off by a little, so ratios ≠ 1 and some clip.
				rng := rand.New(rand.NewPCG(1, 2))
				for si := range b.Sequences {
					for i := range b.Sequences[si].RolloutLogprobs {
						if b.Sequences[si].LossMask[i] != 0 {
							b.Sequences[si].RolloutLogprobs[i] -= float32(0.3 * rng.Float64())
						}
					}
				}
				want, wantG := accumulateSplit(t, tr, b, [][]int{seqRange(len(b.Sequences))})
				var norm float64
				for _, x := range wantG {
					norm = max(norm, math.Abs(x))
				}
				if norm == 0 {
					t.Fatal("zero gradient: the test would prove nothing")
				}
				rapid.Check(t, func(rt *rapid.T) {
					perm := rapid.Permutation(seqRange(len(b.Sequences))).Draw(rt, "order")
					var micro [][]int
					for len(perm) > 0 {
						if rapid.Bool().Draw(rt, "pad") {
							micro = append(micro, nil)
						}
						k := rapid.IntRange(1, len(perm)).Draw(rt, "size")
						micro = append(micro, perm[:k])
						perm = perm[k:]
					}
					got, g := accumulateSplit(rt, tr, b, micro)
					for i := range g {
						if math.Abs(g[i]-wantG[i]) > 1e-12*norm {
							rt.Fatalf("param %s: split %v gives %v, whole batch %v", tr.model.paramName(i), micro, g[i], wantG[i])
						}
					}
					if got.Tokens != want.Tokens || got.ClipFrac != want.ClipFrac ||
						math.Abs(got.Loss-want.Loss) > 1e-12 || math.Abs(got.Entropy-want.Entropy) > 1e-12 ||
						math.Abs(got.Mismatch-want.Mismatch) > 1e-12 || math.Abs(got.KL-want.KL) > 1e-12 {
						rt.Fatalf("split %v: stats %+v, whole batch %+v", micro, got, want)
					}
				})
			})
		}
	}
}

// TestPaddingMicrobatchAddsNothing: a padding microbatch leaves the
// accumulated gradient bit-identical.
func TestPaddingMicrobatchAddsNothing(t *testing.T) {
	tr := accTrainer(t, func(c *TrainerConfig) {})
	b := mixedBatch(t, tr.model, 1)
	_, a := accumulateSplit(t, tr, b, [][]int{{0, 1, 2}, {3, 4, 5}})
	_, p := accumulateSplit(t, tr, b, [][]int{{0, 1, 2}, nil, {3, 4, 5}, nil})
	if !slices.Equal(a, p) {
		t.Fatal("padding microbatches changed the gradient")
	}
}

// TestStepMicrobatchesMatchesStep: the optimiser step on an accumulated
// gradient lands where one big step does (float32 weights, sums reordered).
func TestStepMicrobatchesMatchesStep(t *testing.T) {
	one := accTrainer(t, func(c *TrainerConfig) {})
	acc := accTrainer(t, func(c *TrainerConfig) {})
	b := mixedBatch(t, one.model, 1)
	for step := range 3 {
		s1, err := one.Step(b)
		if err != nil {
			t.Fatal(err)
		}
		s2, err := acc.StepMicrobatches(b, [][]int{{5}, {0, 2}, {}, {4, 1, 3}})
		if err != nil {
			t.Fatal(err)
		}
		if s1.Version != s2.Version || math.Abs(s1.GradNorm-s2.GradNorm) > 1e-9*s1.GradNorm || math.Abs(s1.Loss-s2.Loss) > 1e-9 {
			t.Fatalf("step %d: one batch %+v, microbatches %+v", step, s1, s2)
		}
	}
	for i, w := range one.model.params {
		if d := math.Abs(float64(w - acc.model.params[i])); d > 1e-5 {
			t.Fatalf("param %s differs by %v after 3 steps", one.model.paramName(i), d)
		}
	}
}

// TestAccumulationErrors: misuse is an ErrBatch and changes nothing.
func TestAccumulationErrors(t *testing.T) {
	tr := accTrainer(t, func(c *TrainerConfig) {})
	b := mixedBatch(t, tr.model, 1)
	before := slices.Clone(tr.model.params)
	tot, err := tr.Totals(b)
	if err != nil {
		t.Fatal(err)
	}
	half := Batch{Sequences: b.Sequences[:3]}
	check := func(name string, err error) {
		t.Helper()
		if !errors.Is(err, ErrBatch) {
			t.Errorf("%s: err %v, want ErrBatch", name, err)
		}
	}
	check("accumulate before begin", tr.Accumulate(half))
	_, err = tr.Apply()
	check("apply before begin", err)
	check("zero totals", tr.Begin(BatchTotals{}))
	if err := tr.Begin(tot); err != nil {
		t.Fatal(err)
	}
	check("begin twice", tr.Begin(tot))
	_, err = tr.Step(b)
	check("step while accumulating", err)
	if err := tr.Accumulate(half); err != nil {
		t.Fatal(err)
	}
	_, err = tr.Apply()
	check("apply with a microbatch missing", err)
	check("more tokens than the mini-batch", tr.Accumulate(b))
	tr.Discard()
	for name, micro := range map[string][][]int{
		"sequence missing":  {{0, 1, 2}, {3, 4}},
		"sequence repeated": {{0, 1, 2}, {3, 4, 5, 0}},
		"out of range":      {{0, 1, 2, 3, 4, 5, 6}},
	} {
		_, err := tr.StepMicrobatches(b, micro)
		check(name, err)
	}
	if tr.Version() != 0 || !slices.Equal(before, tr.model.params) {
		t.Fatal("failed accumulation changed the trainer")
	}
	if _, err := tr.StepMicrobatches(b, [][]int{{0, 1, 2}, {3, 4, 5}}); err != nil || tr.Version() != 1 {
		t.Fatalf("valid split after errors: %v, version %d", err, tr.Version())
	}
}
