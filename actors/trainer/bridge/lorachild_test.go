package bridge

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/model/transformer"
)

// TestTorchChildTrainsLoRA: an Init with model.lora makes the torch
// worker train a LoRA adapter; its StepResult carries the adapter
// directory beside the merged serving checkpoint, and the Go side reads
// both: model/transformer applies the adapter onto the base and gets the
// merged checkpoint's model (up to the merged weights' BF16 rounding),
// and an adapter that changes the model.
func TestTorchChildTrainsLoRA(t *testing.T) {
	spec := torchChildSpec(t)
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "ckpt")
	writeHFCheckpoint(t, spec, ckpt, "'qwen3_moe', vocab_size=256, seed=3, std=0.2")
	tc := model.DefaultTrainerConfig()
	tc.LR = 0.05
	in, err := InitFor(tc, true, "hf", ckpt, filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	in.Model.LoRA = &LoRA{R: 4, Alpha: 16, TargetModules: []string{"all-linear"}}
	ctx := context.Background()
	c := startChild(t, spec)
	if _, err := c.Call(ctx, TypeInit, &in, TypeReady, time.Minute); err != nil {
		t.Fatalf("Init: %v", err)
	}
	tb, _ := plainBatch(crossSequences(256))
	rep, err := c.Call(ctx, TypeTrainBatch, tb, TypeStepResult, time.Minute)
	if err != nil {
		t.Fatalf("TrainBatch: %v", err)
	}
	res, err := stepResult(rep)
	if err != nil {
		t.Fatal(err)
	}
	if res.Adapter != filepath.Join(dir, "out", "adapter-v00000001") {
		t.Fatalf("StepResult.adapter %q", res.Adapter)
	}
	a, err := transformer.ReadAdapter(res.Adapter)
	if err != nil {
		t.Fatalf("Go cannot read the worker's adapter: %v", err)
	}
	// every projection: 2 layers × (4 attention + 8 experts × 3)
	if n := len(a.Modules()); n != 2*(4+8*3) || a.Config.R != 4 || a.Config.Scaling() != 4 {
		t.Fatalf("adapter: %d modules, r %d, scaling %v", n, a.Config.R, a.Config.Scaling())
	}
	base, err := transformer.Load(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	adapted, err := a.Apply(base)
	if err != nil {
		t.Fatal(err)
	}
	merged, err := transformer.Load(res.Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	toks := []int32{1, 7, 9, 30, 31, 200}
	la, lm, lb := logits(adapted, toks), logits(merged, toks), logits(base, toks)
	t.Logf("adapter vs merged %g, adapter vs base %g", maxRel(la, lm), maxRel(la, lb))
	if d := maxRel(la, lm); d > 0.02 {
		t.Fatalf("base + adapter and the merged checkpoint differ by %g (relative)", d)
	}
	if d := maxRel(la, lb); d < 0.05 {
		t.Fatalf("the adapter changes the logits by only %g (relative)", d)
	}
}

func logits(m *transformer.Model, toks []int32) []float32 {
	out := make([]float32, m.VocabSize())
	m.NextLogits(toks, out)
	return out
}

// maxRel is max |a−b| over max |b|.
func maxRel(a, b []float32) float64 {
	var num, den float64
	for i := range a {
		num = math.Max(num, math.Abs(float64(a[i]-b[i])))
		den = math.Max(den, math.Abs(float64(b[i])))
	}
	return num / den
}
