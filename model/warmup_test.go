package model

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/asyncrl/asyncrl/model/sampler"
)

func TestLRAt(t *testing.T) {
	c := DefaultTrainerConfig()
	c.LR, c.WarmupSteps = 0.01, 4
	for _, tc := range []struct {
		k    int64
		want float64
	}{{0, 0.0025}, {1, 0.0025}, {2, 0.005}, {3, 0.0075}, {4, 0.01}, {100, 0.01}} {
		if got := c.LRAt(tc.k); math.Abs(got-tc.want) > 1e-15 {
			t.Errorf("LRAt(%d) = %v, want %v", tc.k, got, tc.want)
		}
	}
	c.WarmupSteps = 0
	if got := c.LRAt(1); got != c.LR {
		t.Errorf("no warm-up: LRAt(1) = %v, want %v", got, c.LR)
	}
	c.WarmupSteps = -1
	if err := c.Validate(); !errors.Is(err, ErrConfig) {
		t.Errorf("warmup_steps -1: %v, want ErrConfig", err)
	}
}

// TestWarmupScalesTheFirstStep: Adam's first step moves each weight by
// about LR (m/√v is the gradient's sign), so with WarmupSteps 4 the first
// step moves every weight a quarter as far as without a warm-up, from the
// same weights on the same batch (the torch worker's
// test_warmup_scales_the_first_steps_learning_rate checks the same).
func TestWarmupScalesTheFirstStep(t *testing.T) {
	m, _ := New(tinyConfig(), 2)
	seqs := rollout(t, m, 4, 3, rand.New(rand.NewPCG(1, 2)), sampler.DefaultParams())
	for si := range seqs {
		seqs[si].Advantage = float32(si%2)*2 - 1
	}
	move := func(warm int) []float64 {
		cfg := DefaultTrainerConfig()
		cfg.WarmupSteps = warm
		tr, err := NewTrainer(m.Clone(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		before := slices.Clone(tr.model.params)
		if _, err := tr.Step(Batch{Sequences: seqs}); err != nil {
			t.Fatal(err)
		}
		d := make([]float64, len(before))
		for i := range d {
			d[i] = float64(tr.model.params[i]) - float64(before[i])
		}
		return d
	}
	full, warm := move(0), move(4)
	n := 0
	for i := range full {
		if math.Abs(full[i]) < 1e-4 {
			continue // a weight whose gradient is ~0: Adam's eps dominates
		}
		n++
		if r := warm[i] / full[i]; math.Abs(r-0.25) > 5e-3 {
			t.Fatalf("weight %d moved %g with warm-up 4 against %g without: ratio %g, want 0.25", i, warm[i], full[i], r)
		}
	}
	if n < 20 {
		t.Fatalf("only %d weights moved: the batch trains nothing", n)
	}
}
