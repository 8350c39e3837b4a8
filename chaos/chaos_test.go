package chaos

import (
	"bytes"
	"context"
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
	cfg.Duration = 6 * time.Second
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
}
