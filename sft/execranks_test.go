package sft

import (
	"errors"
	"strings"
	"testing"
)

// TestExecRanksRefused: trainer.exec_ranks > 1 is a clear error for SFT
// (one trainer child), not a setting silently ignored.
func TestExecRanksRefused(t *testing.T) {
	cfg := testConfig(t)
	cfg.Backend, cfg.Exec, cfg.ExecRanks = BackendExec, []string{"/usr/bin/python3"}, 2
	if err := cfg.Validate(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "trainer.exec_ranks is 2") {
		t.Fatalf("err = %v; want ErrConfig naming trainer.exec_ranks", err)
	}
	cfg.ExecRanks = 1
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}
