package sim

import (
	"strings"
	"testing"
)

// TestFailoverTakesOver: over a batch of failover seeds every run makes
// its steps durable with every invariant held, and the batch exercises
// what the scenario is for: a standby claiming from a killed holder and
// requeuing what it had in flight, a deposed holder's save refused by the
// fence, a rollout node's groups requeued after it died.
func TestFailoverTakesOver(t *testing.T) {
	seen := map[string]int{}
	marks := map[string]func(string) bool{
		"takeover":    func(l string) bool { return strings.Contains(l, "claimed token") && !strings.Contains(l, `holder ""`) },
		"requeued":    func(l string) bool { return strings.Contains(l, "requeued (terms before token ") },
		"fenced":      func(l string) bool { return strings.Contains(l, "refused (claimed by token") },
		"dead-groups": func(l string) bool { return strings.Contains(l, "requeued (dead node ") },
	}
	for seed := int64(1); seed <= 60; seed++ {
		res, err := Run(Config{Seed: seed, Scenario: ScenarioFailover, Steps: 8, KeepLog: true})
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if res.StepsTrained != 8 || res.Trained < 8*2 {
			t.Fatalf("seed %d: %d steps durable, %d prompts trained", seed, res.StepsTrained, res.Trained)
		}
		for _, l := range res.Log {
			for k, m := range marks {
				if m(l) {
					seen[k]++
				}
			}
		}
	}
	for k := range marks {
		if seen[k] == 0 {
			t.Errorf("no seed showed %s: %v", k, seen)
		}
	}
	t.Logf("60 seeds: %v", seen)
}
