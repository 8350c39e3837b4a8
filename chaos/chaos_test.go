package chaos

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestShortSessionHoldsInvariants runs the real loop for a few seconds
// under every fault kind.
func TestShortSessionHoldsInvariants(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Duration = 5 * time.Second
	cfg.MeanGap = 400 * time.Millisecond
	cfg.MaxHold = 800 * time.Millisecond
	cfg.Seed = 7
	var progress bytes.Buffer
	cfg.Progress = &progress
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := Run(ctx, cfg)
	var table strings.Builder
	_ = rep.WriteTable(&table)
	t.Logf("\n%s\n%s", progress.String(), table.String())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Total() < 5 {
		t.Fatalf("only %d faults injected", rep.Total())
	}
	// The proxy faults must have bitten: traffic was delayed, reset or
	// held, not just switched on an idle proxy.
	var bit int64
	for _, f := range rep.Faults {
		if f.Kind != KindEngineKill {
			bit += f.Effect
		}
	}
	if bit == 0 {
		t.Fatalf("no proxy fault touched any traffic: %+v", rep.Faults)
	}
}

// TestPlantedForgetfulRestartIsCaught plants a bug — a restarted engine
// comes back with version 0's weights — and wants the session to fail on
// the version invariant: proof that the checks can fail.
func TestPlantedForgetfulRestartIsCaught(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Duration = 2500 * time.Millisecond
	cfg.WarmupSteps = 2 // a restart at version 0 is then a step back
	// Engines at v0 are below the router's minimum version: the planted bug
	// also stalls the loop, so there is no recovery to wait for.
	cfg.RecoverWithin = 2 * time.Second
	cfg.Faults = []string{KindEngineKill}
	cfg.MeanGap = 300 * time.Millisecond
	cfg.MaxHold = 400 * time.Millisecond
	cfg.Seed = 3
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := run(ctx, cfg, true)
	var table strings.Builder
	_ = rep.WriteTable(&table)
	t.Logf("\n%s", table.String())
	if !errors.Is(err, ErrViolation) {
		t.Fatalf("want ErrViolation, got %v", err)
	}
	var broken []string
	for _, inv := range rep.Violations() {
		broken = append(broken, inv.Name)
	}
	if !slices.Contains(broken, InvVersionsGrow) {
		t.Fatalf("violations %v do not include %q", broken, InvVersionsGrow)
	}
	if rep.Faults[0].Kind != KindEngineKill || rep.Faults[0].Count == 0 {
		t.Fatalf("faults %+v", rep.Faults)
	}
}

// TestInterruptStopsCleanly: Ctrl-C (the context ending) mid-session still
// heals, stops and reports, and says it was interrupted instead of
// blaming the loop.
func TestInterruptStopsCleanly(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Duration = time.Minute
	cfg.MeanGap = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrViolation) {
		t.Fatalf("want the context's error, got %v", err)
	}
	if !rep.Interrupted || len(rep.Invariants) == 0 {
		t.Fatalf("interrupted %v, %d verdicts", rep.Interrupted, len(rep.Invariants))
	}
}
