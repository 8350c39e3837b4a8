package controller

import (
	"math/rand/v2"
	"testing"

	"github.com/asyncrl/asyncrl/actors/filter"
	"github.com/asyncrl/asyncrl/messages"
)

// SkyRL's dynamic sampling carried into the running loop
// (skyrl-train/skyrl_train/utils/trainer_utils.py: handle_filter_sampling,
// handle_replace_sampling, zero_variance_filter; trainer.py
// handle_dynamic_sampling counts sample_batch_count and raises once it
// reaches max_sample_batches while more are needed). Its stories are
// scenario files (testdata/sampling_*.txt); this file keeps what a file
// cannot say: a hundred filtered groups in a row never exhaust an
// unbounded max_sample_batches.

func samplingConfig(b, w, s int64, mode filter.Mode, maxBatches int) Config {
	cfg := testConfig(b, w, s)
	fc := filter.DefaultConfig()
	fc.Mode, fc.NSamplesPerPrompt, fc.MaxSampleBatches = mode, 2, maxBatches
	cfg.Sampling = fc
	cfg.Rand = rand.New(rand.NewPCG(7, 7))
	return cfg
}

// startSampling builds a core from cfg, starts it and returns the groups
// it admitted.
func startSampling(t *testing.T, cfg Config) (*Core, []messages.PromptAssigned) {
	t.Helper()
	c, err := New(cfg, &seqSource{})
	if err != nil {
		t.Fatal(err)
	}
	c.Start(t0)
	return c, assigned(t, sent(c)["P"])
}

func bad(p messages.PromptAssigned) messages.GroupFiltered {
	return messages.GroupFiltered{GroupID: p.GroupID, PromptID: p.PromptID, Reason: messages.FilterZeroVariance}
}

func TestFilterUnboundedNeverExhausts(t *testing.T) {
	c, next := startSampling(t, samplingConfig(2, 4, 1, filter.ModeFilter, -1))
	for range 100 {
		c.Step(t0, bad(next[0]))
		out := sent(c)
		for _, m := range out["S"] {
			if _, ok := m.(messages.SamplingExhausted); ok {
				t.Fatal("exhausted with max_sample_batches -1")
			}
		}
		next = append(next[1:], assigned(t, out["P"])...)
	}
}
