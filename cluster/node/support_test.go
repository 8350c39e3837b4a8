package node

import (
	"testing"

	"github.com/asyncrl/asyncrl/actors/trainer"
)

// With normalize_over_support the rollout records the engines'
// support-normalised logprobs and the trainer normalises over the same
// sets, so on the first step (engines and trainer hold the same weights)
// the train–inference mismatch is BF16 rounding only. Full-vocabulary
// rollout logprobs against a support-normalising trainer would differ by
// nats (2.8 measured), which is why the option needs both halves.
func TestSupportNormalisedRunWithMicrobatches(t *testing.T) {
	cfg := smallConfig(t, 2)
	cfg.Rollout.TopK = 8
	cfg.Trainer.NormalizeOverSupport = true
	cfg.Trainer.MaxTokensPerMicrobatch = 40
	cfg.Trainer.DPSize = 2
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	n, s := runNode(t, cfg, nil)
	if s.Steps != 2 || len(s.PerStep) != 2 {
		t.Fatalf("steps %d, rows %d", s.Steps, len(s.PerStep))
	}
	first := s.PerStep[0]
	if !(first.Mismatch < 0.01) {
		t.Fatalf("step 1 mismatch %v with equal weights, want BF16 rounding only (< 0.01)", first.Mismatch)
	}
	if first.Microbatches < 2 {
		t.Fatalf("step 1 used %d microbatches with a 40-token cap and dp 2", first.Microbatches)
	}
	checkLedger(t, n, s)
}

// steps returns the node's kept trained steps (all of a test's run: the
// newest trainer.RecordsKept).
func (n *Node) steps() []trainer.StepRecord {
	recs, _ := n.Steps(0)
	return recs
}
