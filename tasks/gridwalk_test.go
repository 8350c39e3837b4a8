package tasks

import (
	"strings"
	"testing"
)

func TestGridRewards(t *testing.T) {
	task := mustGet(t, "gridwalk")
	p := Prompt{Text: "walk 0,0>2,1:"}
	const T = 12.0
	step := 0.2 / T // valid and closer

	// Perfect: shortest path; case and trailing junk do not matter.
	obs, r, done := play(t, task, p, "r", " R junk", "d")
	if !done || strings.Join(obs, "") != " 1,0: 2,0:"+GridGoal || !near(r, 3*step+0.5+0.3*9/11) {
		t.Errorf("shortest path: %q %v %v", obs, r, done)
	}
	// Partially correct: off the grid (nothing), closer, farther, then
	// garbage until MaxTurns.
	acts := []string{"l", "d", "u", "x", "", "?u", "9", " ", "ud", "Z", "!", "~"}
	obs, r, done = play(t, task, p, acts...)
	wantObs := []string{" 0,0:", " 0,1:", " 0,0:"}
	for i, w := range wantObs {
		if obs[i] != w {
			t.Fatalf("obs %q, want prefix %q", obs, wantObs)
		}
	}
	if !done || !near(r, step+0.1/T) || len(obs) != 12 || obs[11] != " 0,0:" {
		t.Errorf("partial: reward %v done %v obs %q", r, done, obs)
	}
	// Garbage: nothing, position repeated, done after 12 turns.
	g := make([]string, 12)
	for i := range g {
		g[i] = "x"
	}
	obs, r, done = play(t, task, p, g...)
	if !done || r != 0 || obs[5] != " 0,0:" {
		t.Errorf("garbage: %v %v %q", r, done, obs)
	}
	// Reaching the goal on the last turn still wins, with the smallest bonus.
	_, r, done = play(t, task, p, append(g[:9:9], "r", "r", "d")...)
	if !done || !near(r, 3*step+0.5) {
		t.Errorf("last-turn win: reward %v done %v", r, done)
	}
}

func TestGridBadPrompts(t *testing.T) {
	for _, text := range []string{"walk 0,0>0,0:", "walk 4,0>1,1:", "walk 0,0>1,1", "walk 00,0>1,1:", "walk 0,0>1,1: ", "go 0,0>1,1:", "walk -1,0>1,1:"} {
		if _, err := mustGet(t, "gridwalk").NewEnv().Reset(Prompt{Text: text}); err == nil || !strings.Contains(err.Error(), text) {
			t.Errorf("Reset(%q): err = %v", text, err)
		}
	}
}
