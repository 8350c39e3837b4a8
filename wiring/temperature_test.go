package wiring_test

import (
	"testing"

	"github.com/asyncrl/asyncrl/actors/trainer/bridge"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/wiring"
)

// A run sampling below temperature 1 trains on logprobs at the same
// temperature: the engines return log_softmax(logits/T) of what they
// sampled (engine/doc.go output_logprobs), so the trainer's own logprobs
// (the PPO ratio's numerator) must divide its logits by the same T, as
// SkyRL's trainer does with generator.sampling_params.temperature
// (NovaSky-AI/SkyRL skyrl-train/skyrl_train/model_wrapper.py @850eee37:
// logits_BSV.div_(temperature)). rollout.temperature reaches both the
// built-in trainer's config and the exec child's Init.loss; temperature 0
// (greedy, no distribution) leaves the trainer at 1.
func TestRolloutTemperatureReachesTheTrainer(t *testing.T) {
	for _, tc := range []struct{ rollout, want float64 }{{0.5, 0.5}, {1, 1}, {0, 1}} {
		c := config.Default()
		c.Rollout.Temperature = tc.rollout
		tr := wiring.PolicyTrainer(c)
		if tr.Temperature != tc.want {
			t.Errorf("rollout.temperature %v: trainer temperature %v, want %v", tc.rollout, tr.Temperature, tc.want)
		}
		in, err := bridge.InitFor(tr, true, "hf", t.TempDir(), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if got := in.Loss["temperature"]; got != tc.want {
			t.Errorf("rollout.temperature %v: the exec child's loss temperature %v, want %v", tc.rollout, got, tc.want)
		}
	}
}
