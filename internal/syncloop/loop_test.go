package syncloop

import (
	"errors"
	"slices"
	"testing"

	"github.com/asyncrl/asyncrl/tasks"
)

func run(t *testing.T, task string, cfg Config, steps int) []StepResult {
	t.Helper()
	tk, err := tasks.Get(task)
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(tk, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out []StepResult
	for range steps {
		r, err := l.Step()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func mean(rs []StepResult) float64 {
	var s float64
	for _, r := range rs {
		s += r.MeanReward
	}
	return s / float64(len(rs))
}

// TestLearnsReverse is the acceptance test: GRPO on the reverse task with
// the built-in model, 16 prompts × 8 samples per step, temperature 1, seed 1.
// Measured curve (mean reward per 40 steps, DefaultConfig, seed 1):
//
//	steps   1-40  41-80  81-120 121-160 161-200 201-240 241-280 281-320 321-360 361-400
//	reward  0.23  0.32   0.33   0.36    0.41    0.45    0.49    0.55    0.57    0.58
//
// A uniformly random policy earns 0.046; the first steps learn to emit only
// alphabet letters (≈0.30), the rest is learning which letter goes where
// (about 20% of episodes exactly solved by step 400). Seeds 2 and 3 ended
// (last 40 steps) at 0.75 and 0.59. About 11 s of CPU on one core.
// Assert last-40 > first-40 + 0.25.
func TestLearnsReverse(t *testing.T) {
	const steps = 400
	rs := run(t, "reverse", DefaultConfig(), steps)
	for i := 0; i < steps; i += 40 {
		t.Logf("steps %3d-%3d: reward %.3f solved %.2f len %.1f entropy %.2f mismatch %.2g",
			i+1, i+40, mean(rs[i:i+40]), rs[i+39].Solved, rs[i+39].MeanLen, rs[i+39].Stats.Entropy, rs[i+39].Stats.Mismatch)
	}
	first, last := mean(rs[:40]), mean(rs[steps-40:])
	t.Logf("first-40 mean %.3f, last-40 mean %.3f", first, last)
	if last < first+0.25 {
		t.Errorf("reward did not rise: first-40 %.3f, last-40 %.3f (measured 0.23 → 0.58)", first, last)
	}
	// The serving copy is the BF16 rounding of the trainer's weights, so the
	// train–inference mismatch stays tiny throughout.
	for _, r := range rs {
		if r.Stats.Mismatch > 5e-3 {
			t.Fatalf("step %d: mismatch %v: serving copy out of sync with the trainer", r.Step, r.Stats.Mismatch)
		}
	}
}

func TestDeterministic(t *testing.T) {
	a := run(t, "reverse", DefaultConfig(), 5)
	b := run(t, "reverse", DefaultConfig(), 5)
	if !slices.Equal(a, b) {
		t.Fatalf("same seed, different runs:\n%v\n%v", a, b)
	}
	cfg := DefaultConfig()
	cfg.Seed = 2
	if c := run(t, "reverse", cfg, 5); slices.Equal(a, c) {
		t.Fatal("different seeds gave identical runs")
	}
}

func TestMultiTurnEpisodes(t *testing.T) {
	// The guess task exercises the multi-turn path: environment replies are
	// context, and each turn's tokens are trained.
	rs := run(t, "guess", DefaultConfig(), 2)
	for _, r := range rs {
		if r.MeanLen <= float64(3) || r.Stats.Tokens == 0 {
			t.Fatalf("multi-turn step %+v: expected several turns of generated tokens", r)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	tk, _ := tasks.Get("reverse")
	for name, mod := range map[string]func(*Config){
		"groups":      func(c *Config) { c.Groups = 0 },
		"samples":     func(c *Config) { c.Samples = 0 },
		"temperature": func(c *Config) { c.Sampling.Temperature = 0.5 },
	} {
		cfg := DefaultConfig()
		mod(&cfg)
		if _, err := New(tk, cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
