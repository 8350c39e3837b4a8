package weightsync

import (
	"context"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine/enginetest"
)

// The run's preflight fails the start where the run would fail, naming
// the engine, the finding and its fix: pause_mode keep on vLLM 0.14 (its
// /pause drops mode and would abort), and support sets wider than
// --max-logprobs; the same engine with pause_mode wait passes.
func TestPreflightGradesTheRunsNeeds(t *testing.T) {
	f := enginetest.NewVLLMReleaseFake("0.14", enginetest.ReleaseOptions{FakeOptions: enginetest.FakeOptions{DevMode: true, Extension: true}})
	defer f.Close()
	cfg := config.Default()
	cfg.Engines.ServedModelName = "Qwen/Qwen3-0.6B"
	e := config.ExternalEngine{URL: f.URL, Kind: config.EngineVLLM}
	cfg.Engines.External = []config.ExternalEngine{e}
	d, err := DriveExternal(0, e, cfg.Engines.ServedModelName)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	cfg.Trainer.PauseMode = config.PauseKeep
	err = d.Preflight(ctx, NeedsOf(cfg, e))
	if err == nil || !strings.Contains(err.Error(), "external-0") || !strings.Contains(err.Error(), "pause mode keep") || !strings.Contains(err.Error(), "vLLM >= 0.16.0") {
		t.Fatalf("keep on 0.14: %v", err)
	}

	cfg.Trainer.PauseMode = config.PauseWait
	if err := d.Preflight(ctx, NeedsOf(cfg, e)); err != nil {
		t.Fatalf("wait on 0.14: %v", err)
	}

	cfg.Rollout.SupportFromLogprobs = 32
	err = d.Preflight(ctx, NeedsOf(cfg, e))
	if err == nil || !strings.Contains(err.Error(), "--max-logprobs 32") {
		t.Fatalf("support 32 on a default --max-logprobs: %v", err)
	}
}
