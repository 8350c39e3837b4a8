package tasks

import (
	"errors"
	"strconv"
	"testing"
)

// secretOf finds the hidden number of a guess prompt by asking for every
// value in turn on fresh envs, so the test does not re-implement the seed
// derivation it is checking.
func secretOf(t *testing.T, task Task, p Prompt) int {
	t.Helper()
	for g := 1; g <= 20; g++ {
		env := task.NewEnv()
		if _, err := env.Reset(p); err != nil {
			t.Fatal(err)
		}
		if obs, _, _, _ := env.Step(strconv.Itoa(g)); obs == GuessCorrect {
			return g
		}
	}
	t.Fatalf("no secret in 1..20 for %+v", p)
	return 0
}

// play runs the actions and returns the observations, total reward and
// whether the last step ended the episode.
func play(t *testing.T, task Task, p Prompt, actions ...string) (obs []string, total float64, done bool) {
	t.Helper()
	env := task.NewEnv()
	if _, err := env.Reset(p); err != nil {
		t.Fatal(err)
	}
	for i, a := range actions {
		o, r, d, err := env.Step(a)
		if err != nil {
			t.Fatalf("step %d %q: %v", i+1, a, err)
		}
		if d && i != len(actions)-1 {
			t.Fatalf("done early at step %d of %v", i+1, actions)
		}
		obs, total, done = append(obs, o), total+r, d
	}
	return obs, total, done
}

func TestGuessRewards(t *testing.T) {
	task := mustGet(t, "guess")
	if task.MaxTurns() != 10 {
		t.Fatalf("MaxTurns = %d, want 10", task.MaxTurns())
	}
	// A prompt whose number is in 3..18, so there is room on both sides.
	var p Prompt
	var s int
	for seed := int64(1); ; seed++ {
		p = Prompt{Text: "guess 1-20:", Seed: seed}
		if s = secretOf(t, task, p); s >= 3 && s <= 18 {
			break
		}
	}
	str := strconv.Itoa

	// Perfect: right on turn 1 = valid + consistent + full win.
	obs, r, done := play(t, task, p, str(s))
	if !done || obs[0] != GuessCorrect || !near(r, 0.01+0.01+0.8) {
		t.Errorf("first-turn win: %v %v %v", obs, r, done)
	}
	// Whitespace before and junk after the number are fine.
	if _, r2, _ := play(t, task, p, " "+str(s)+"!?"); !near(r2, r) {
		t.Errorf("padded guess: reward %v, want %v", r2, r)
	}
	// Partially correct: below, above, consistent, then right on turn 4.
	obs, r, done = play(t, task, p, str(s-2), str(s+2), str(s-1), str(s))
	want := []string{GuessHigher, GuessLower, GuessHigher, GuessCorrect}
	for i := range want {
		if obs[i] != want[i] {
			t.Fatalf("obs %v, want %v", obs, want)
		}
	}
	if !done || !near(r, 4*0.02+0.5+0.3*6/9) {
		t.Errorf("turn-4 win: reward %v done %v", r, done)
	}
	// An inconsistent guess (below a number already known to be too low)
	// earns only the validity shaping.
	_, r, _ = play(t, task, p, str(s-1), str(s-2))
	if !near(r, 0.02+0.01) {
		t.Errorf("inconsistent guess: reward %v, want 0.03", r)
	}
	// Garbage for all 10 turns: nothing, done after MaxTurns.
	g := []string{"x", "", "abc", "0", "21", "-3", " ", "??", "e1", "9999999"}
	g[9] = "999"
	obs, r, done = play(t, task, p, g...)
	if !done || r != 0 {
		t.Errorf("garbage: reward %v done %v", r, done)
	}
	for i, o := range obs {
		if o != GuessInvalid {
			t.Errorf("garbage turn %d %q: obs %q, want invalid", i+1, g[i], o)
		}
	}
	// Valid but stuck on 1: turn 1 is consistent, then only valid.
	ones := make([]string, 10)
	for i := range ones {
		ones[i] = "1"
	}
	_, r, done = play(t, task, p, ones...)
	if !done || !near(r, 0.02+9*0.01) {
		t.Errorf("stuck on 1: reward %v done %v", r, done)
	}
	env := task.NewEnv()
	env.Reset(p)
	for range 10 {
		env.Step("x")
	}
	if _, _, _, err := env.Step(str(s)); !errors.Is(err, ErrEpisodeDone) {
		t.Errorf("step after MaxTurns: err = %v", err)
	}
}

func TestGuessRangeFromText(t *testing.T) {
	task := mustGet(t, "guess")
	seen := map[int]bool{}
	for seed := int64(0); seed < 60; seed++ {
		s := secretOf(t, task, Prompt{Text: "guess 1-3:", Seed: seed})
		if s < 1 || s > 3 {
			t.Fatalf("seed %d: secret %d outside 1-3", seed, s)
		}
		seen[s] = true
	}
	if len(seen) != 3 {
		t.Errorf("secrets over 60 seeds: %v, want all of 1..3", seen)
	}
}

// TestGuessBisectionAlwaysWins: an optimal player wins within
// ceil(log2 20) = 5 turns, so the 10-turn budget is generous.
func TestGuessBisectionAlwaysWins(t *testing.T) {
	task := mustGet(t, "guess")
	for seed := int64(0); seed < 200; seed++ {
		env := task.NewEnv()
		env.Reset(Prompt{Seed: seed})
		lo, hi, total := 1, 20, 0.0
		for turn := 1; ; turn++ {
			g := (lo + hi) / 2
			obs, r, done, err := env.Step(strconv.Itoa(g))
			if err != nil {
				t.Fatal(err)
			}
			total += r
			if obs == GuessCorrect {
				if want := 0.02*float64(turn) + 0.5 + 0.3*float64(10-turn)/9; turn > 5 || !near(total, want) {
					t.Fatalf("seed %d: won on turn %d with %v, want <= 5 and %v", seed, turn, total, want)
				}
				break
			}
			if done {
				t.Fatalf("seed %d: bisection lost", seed)
			}
			if obs == GuessHigher {
				lo = g + 1
			} else {
				hi = g - 1
			}
		}
	}
}
