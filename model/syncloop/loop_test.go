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

// TestLearns is the acceptance test: GRPO with the built-in model, 16
// prompts × 8 samples per step, temperature 1, DefaultConfig, seed 1, 300
// steps. Measured curves (mean reward per 30 steps):
//
//	steps    1-30 31-60 61-90 91-120 121-150 151-180 181-210 211-240 241-270 271-300
//	sort     0.20 0.32  0.35  0.40   0.46    0.49    0.57    0.61    0.63    0.63
//	reverse  0.20 0.31  0.33  0.34   0.36    0.39    0.43    0.45    0.48    0.53
//
// A uniformly random policy earns 0.046 on both; the first steps learn to
// emit only alphabet letters (≈0.30), the rest is learning which letter
// goes where. sort learns fastest and most reliably of the single-turn
// tasks: seeds 2 and 3 ended at 0.67 and 0.77 (exactly solved: 36%, 57%);
// copy ended at 0.68 / 0.97 / 0.51 and arith crawled from 0.12 to 0.28 in
// 200 steps; reverse reached 0.58 after 400 steps. About 8 s of CPU per
// task on one core; the two tasks run in parallel.
func TestLearns(t *testing.T) {
	for _, tc := range []struct {
		task     string
		minRise  float64
		measured string
	}{
		{"sort", 0.3, "0.20 → 0.63"},
		{"reverse", 0.2, "0.20 → 0.53"},
	} {
		t.Run(tc.task, func(t *testing.T) {
			t.Parallel() // one core each
			const steps, w = 300, 30
			rs := run(t, tc.task, DefaultConfig(), steps)
			for i := 0; i < steps; i += w {
				t.Logf("steps %3d-%3d: reward %.3f solved %.2f len %.1f entropy %.2f mismatch %.2g",
					i+1, i+w, mean(rs[i:i+w]), rs[i+w-1].Solved, rs[i+w-1].MeanLen, rs[i+w-1].Stats.Entropy, rs[i+w-1].Stats.Mismatch)
			}
			first, last := mean(rs[:w]), mean(rs[steps-w:])
			t.Logf("first-%d mean %.3f, last-%d mean %.3f", w, first, w, last)
			if last < first+tc.minRise {
				t.Errorf("reward did not rise by %.2f: first %.3f, last %.3f (measured %s)", tc.minRise, first, last, tc.measured)
			}
			// The serving copy is the BF16 rounding of the trainer's
			// weights, so the train–inference mismatch stays tiny.
			for _, r := range rs {
				if r.Stats.Mismatch > 5e-3 {
					t.Fatalf("step %d: mismatch %v: serving copy out of sync with the trainer", r.Step, r.Stats.Mismatch)
				}
			}
		})
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
