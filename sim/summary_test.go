package sim

import (
	"errors"
	"strings"
	"testing"
)

func TestRunSeedsSummary(t *testing.T) {
	s, err := RunSeeds(Config{Seed: 3, Scenario: ScenarioFaults, Steps: 4}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if s.Seeds != 3 || s.Passed != 3 || s.StepsTrained != 12 || s.FirstSeed != 3 || s.LogHash != "" {
		t.Fatalf("summary %+v", s)
	}
	var sum int
	for _, n := range s.Faults {
		sum += n
	}
	text := s.Format()
	for _, want := range []string{"seeds 3..5, scenario faults: 3 of 3 passed", "steps trained     12", "invariants"} {
		if !strings.Contains(text, want) {
			t.Fatalf("summary lacks %q:\n%s", want, text)
		}
	}
	if sum > 0 && !strings.Contains(text, "faults injected   ") {
		t.Fatalf("summary lacks faults:\n%s", text)
	}
	one, err := RunSeeds(Config{Seed: 3, Scenario: ScenarioFaults, Steps: 4}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if one.LogHash == "" || one.Workload == "" || !strings.Contains(one.Format(), one.LogHash) {
		t.Fatalf("single-seed summary lacks hash or workload:\n%s", one.Format())
	}
	// A violation stops the batch at its seed.
	s, err = RunSeeds(Config{Seed: 1, Steps: 8, Bugs: []Bug{BugRouterIgnoresGating}}, 50)
	var v *Violation
	if !errors.As(err, &v) || s.Seeds != int(v.Seed) || s.Passed != s.Seeds-1 {
		t.Fatalf("err %v, summary %+v", err, s)
	}
	if _, err := RunSeeds(Config{}, 0); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("0 seeds: %v", err)
	}
}
