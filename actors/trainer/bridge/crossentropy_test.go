package bridge

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/model"
)

// sftBatch is crossSequences as a supervised TrainBatch (loss
// cross_entropy): tokens, offsets, loss mask and group ids only — no
// rollout logprobs, versions, rewards or advantages.
func sftBatch(seqs []crossSeq, step int64) *TrainBatch {
	var tok []int32
	var off []int64
	var mask []uint8
	groups := make([]string, len(seqs))
	for i, s := range seqs {
		off = append(off, int64(len(tok)))
		tok = append(tok, s.tokens...)
		mask = append(mask, s.mask...)
		groups[i] = fmt.Sprintf("ex-%d", i)
	}
	off = append(off, int64(len(tok)))
	return &TrainBatch{Step: step, Loss: LossCrossEntropy, Groups: groups, Microbatches: [][]int{{0, 3, 5}, {1, 6}, {2, 4, 7}},
		Arrays: map[string]Tensor{"tokens": Int32Tensor(tok), "seq_offsets": Int64Tensor(off), "loss_mask": Uint8Tensor(mask)}}
}

// refNLL is the token-mean NLL of the batch under m, computed here from
// NextLogits in float64.
func refNLL(m *model.Model, seqs []crossSeq) float64 {
	logits := make([]float32, m.VocabSize())
	var sum float64
	var n int
	for _, s := range seqs {
		for i := 1; i < len(s.tokens); i++ {
			if s.mask[i] == 0 {
				continue
			}
			m.NextLogits(s.tokens[:i], logits)
			mx := math.Inf(-1)
			for _, l := range logits {
				mx = max(mx, float64(l))
			}
			var z float64
			for _, l := range logits {
				z += math.Exp(float64(l) - mx)
			}
			sum -= float64(logits[s.tokens[i]]) - mx - math.Log(z)
			n++
		}
	}
	return sum / float64(n)
}

// TestBuiltinChildCrossEntropy: the Go child trains a TrainBatch with loss
// cross_entropy (no RL arrays), reports the batch's NLL under the weights
// before the step, and repeated steps lower it; an unknown loss name and an
// RL batch without its rollout logprobs are refused with the field named.
func TestBuiltinChildCrossEntropy(t *testing.T) {
	mcfg := crossModel()
	initM, initDir := servingInit(t, mcfg, 5)
	dir := t.TempDir()
	seqs := crossSequences(mcfg.VocabSize)
	c := startChild(t, goChildSpec())
	ctx := context.Background()
	tc := model.DefaultTrainerConfig()
	tc.LR = 1e-2
	in, err := InitFor(tc, true, "builtin", initDir, filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(ctx, TypeInit, &in, TypeReady, time.Minute); err != nil {
		t.Fatal(err)
	}
	bad := sftBatch(seqs, 1)
	bad.Loss = "mse"
	var ce *ChildError
	if _, err := c.Call(ctx, TypeTrainBatch, bad, TypeStepResult, time.Minute); !errors.As(err, &ce) || ce.Field != "loss" {
		t.Fatalf("unknown loss: %v, want a bad_field on loss", err)
	}
	rl := sftBatch(seqs, 1)
	rl.Loss = ""
	if _, err := c.Call(ctx, TypeTrainBatch, rl, TypeStepResult, time.Minute); !errors.As(err, &ce) || ce.Field != "arrays.rollout_logprobs" {
		t.Fatalf("RL batch without rollout logprobs: %v", err)
	}
	want := refNLL(initM, seqs)
	var last StepResult
	for s := int64(1); s <= 30; s++ {
		rep, err := c.Call(ctx, TypeTrainBatch, sftBatch(seqs, s), TypeStepResult, time.Minute)
		if err != nil {
			t.Fatalf("step %d: %v", s, err)
		}
		if last, err = stepResult(rep); err != nil {
			t.Fatal(err)
		}
		if s == 1 {
			if got := last.Metrics["loss"]; math.Abs(got-want) > 1e-9*want {
				t.Fatalf("step 1 loss %.12g, NLL of the batch %.12g", got, want)
			}
		}
	}
	m, err := model.LoadServing(last.Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	if after := refNLL(m, seqs); !(after < 0.8*want) {
		t.Fatalf("NLL %.4f → %.4f after 30 CE steps: not learning", want, after)
	}
}

// TestGoAndTorchCrossEntropyAgree: the Go child and the PyTorch worker get
// the same Init and the same supervised TrainBatches (loss cross_entropy)
// and report the same loss (the token-mean NLL) and gradient norm, step by
// step (skips where /usr/bin/python3 lacks torch, like the RL cross-check).
func TestGoAndTorchCrossEntropyAgree(t *testing.T) {
	torchSpec := torchChildSpec(t)
	mcfg := crossModel()
	initM, initDir := servingInit(t, mcfg, 11)
	dir := t.TempDir()
	seqs := crossSequences(mcfg.VocabSize)
	ctx := context.Background()
	goC, torchC := startChild(t, goChildSpec()), startChild(t, torchSpec)
	for _, red := range []string{model.TokenMean, model.SequenceMean} {
		tc := model.DefaultTrainerConfig()
		tc.Reduction, tc.LR = red, 1e-2
		for ci, c := range []*Child{goC, torchC} {
			in, err := InitFor(tc, true, "builtin", initDir, filepath.Join(dir, red, fmt.Sprint(ci)))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Call(ctx, TypeInit, &in, TypeReady, time.Minute); err != nil {
				t.Fatalf("%s: child %d Init: %v", red, ci, err)
			}
		}
		for s := int64(1); s <= 3; s++ {
			var res [2]StepResult
			for ci, c := range []*Child{goC, torchC} {
				rep, err := c.Call(ctx, TypeTrainBatch, sftBatch(seqs, s), TypeStepResult, time.Minute)
				if err != nil {
					t.Fatalf("%s: child %d step %d: %v", red, ci, s, err)
				}
				if res[ci], err = stepResult(rep); err != nil {
					t.Fatal(err)
				}
			}
			if s == 1 && red == model.TokenMean {
				if want := refNLL(initM, seqs); math.Abs(res[0].Metrics["loss"]-want) > 1e-9*want {
					t.Errorf("go step 1 loss %.9g, reference NLL %.9g", res[0].Metrics["loss"], want)
				}
			}
			// same tolerances as TestGoAndTorchTrainersAgree: float32
			// summation order at step 1, Adam noise afterwards
			tol := 1e-6
			if s > 1 {
				tol = 5e-5
			}
			for _, key := range []string{"loss", "grad_norm", "entropy", "tokens"} {
				g, p := res[0].Metrics[key], res[1].Metrics[key]
				if d := math.Abs(g-p) / max(math.Abs(g), 1e-3); d > tol {
					t.Errorf("%s step %d: %s go %.9g torch %.9g (rel %.2g > %.0g)", red, s, key, g, p, d, tol)
				}
			}
		}
	}
}
