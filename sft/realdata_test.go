package sft

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/asyncrl/asyncrl/sft/data"
)

// TestResumeOnRealData: the runner on the real data path (data.Open over
// generated Arrow and JSONL shards, a mixture without replacement, and
// data.Pack): stop at step k, resume, and steps k+1… draw the uninterrupted
// run's examples with bit-equal losses; the loss falls on the learnable
// "counting" data.
func TestResumeOnRealData(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	for i, format := range []string{data.FormatArrow, data.FormatJSONL} {
		if err := data.Generate(ctx, data.GenerateOptions{Dir: filepath.Join(dir, format), Tokens: 1 << 14, Shards: 2,
			Seed: uint64(i + 1), VocabSize: 32, MinLen: 6, MaxLen: 30, Format: format, Pattern: "counting", Mask: i == 0}); err != nil {
			t.Fatal(err)
		}
	}
	base := testConfig(t)
	base.Data = data.Config{Datasets: []data.DatasetConfig{
		{Name: "arrow", Path: filepath.Join(dir, data.FormatArrow), Weight: 0.7},
		{Name: "jsonl", Path: filepath.Join(dir, data.FormatJSONL), Weight: 0.3}},
		Sampler: data.SamplerConfig{Kind: "mixture", Seed: 3, Temperature: 1}, IndexDir: filepath.Join(dir, "index")}
	base.Steps, base.CheckpointEvery = 12, 0
	run := func(cfg Config) []StepRecord {
		t.Helper()
		var rec []StepRecord
		if _, err := Run(ctx, cfg, Options{OnStep: func(r StepRecord) { rec = append(rec, r) }}); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	full := run(base)
	if !(full[len(full)-1].Loss < 0.85*full[0].Loss) {
		t.Fatalf("loss %.4f → %.4f on counting data", full[0].Loss, full[len(full)-1].Loss)
	}
	seen := map[uint32]int{}
	for _, r := range full {
		for _, id := range r.IDs {
			seen[id.Dataset]++
		}
	}
	if seen[0] == 0 || seen[1] == 0 {
		t.Fatalf("examples per dataset %v: the mixture drew from one only", seen)
	}
	cfg := base
	cfg.OutputDir = t.TempDir()
	cfg.Steps = 5
	sameSteps(t, "real data before the stop", run(cfg), full[:5], 0)
	cfg.Steps, cfg.Resume = 12, true
	sameSteps(t, "real data after resume", run(cfg), full[5:], 0)
}
