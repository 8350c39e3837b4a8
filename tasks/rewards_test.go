package tasks

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func mustGet(t *testing.T, name string) Task {
	t.Helper()
	task, err := Get(name)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// score resets a single-turn env on text and scores one answer.
func score(t *testing.T, task Task, text, answer string) float64 {
	t.Helper()
	env := task.NewEnv()
	obs, err := env.Reset(Prompt{ID: "x", Text: text})
	if err != nil {
		t.Fatalf("Reset(%q): %v", text, err)
	}
	if obs != text {
		t.Fatalf("Reset(%q) obs = %q, want the prompt text", text, obs)
	}
	obs, r, done, err := env.Step(answer)
	if err != nil || !done || obs != "" {
		t.Fatalf("Step(%q) = %q, %v, %v, %v; want \"\", done, nil", answer, obs, r, done, err)
	}
	if _, _, _, err := env.Step(answer); !errors.Is(err, ErrEpisodeDone) {
		t.Fatalf("second Step: err = %v, want ErrEpisodeDone", err)
	}
	return r
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestSingleTurnRewards(t *testing.T) {
	cases := []struct {
		task, text, answer string
		want               float64
	}{
		// reverse: target "cba".
		{"reverse", "rev abc=", "cba", 1},
		{"reverse", "rev abc=", "  cba\n", 1},   // surrounding whitespace ignored
		{"reverse", "rev abc=", "cba  xyz!", 1}, // garbage after a space ignored
		{"reverse", "rev abc=", "cab", 0.5/3 + 0.2 + 0.1},
		{"reverse", "rev abc=", "cb", 0.5*2/3 + 0.2*2/3 + 0.05},
		{"reverse", "rev abc=", "cbaX", 0.5 + 0.2*3/4 + 0.05}, // glued garbage costs credit
		{"reverse", "rev abc=", "XYZ", 0.1},                   // right length only
		{"reverse", "rev abc=", "e", 0.2 / 3},                 // alphabet only
		{"reverse", "rev abc=", "!!!!!!", 0},
		{"reverse", "rev abc=", "", 0},
		{"reverse", "rev abc=", "   ", 0},
		{"reverse", "rev ddeea=", "aeedd", 1},
		// sort: target "abc".
		{"sort", "sort cab=", "abc", 1},
		{"sort", "sort cab=", "cab", 0.2 + 0.1},
		{"sort", "sort cab=", "abd", 0.5*2/3 + 0.2 + 0.1},
		// copy: target "ab".
		{"copy", "copy ab=", "ab", 1},
		{"copy", "copy ab=", "ba", 0.3},
		// arith: target "12".
		{"arith", "7+5=", "12", 1},
		{"arith", "7+5=", " 12 junk", 1},
		{"arith", "7+5=", "13", 0.25 + 0.1 + 0.1},  // tens digit right
		{"arith", "7+5=", "2", 0.25 + 0.05 + 0.05}, // units digit right, one short
		{"arith", "7+5=", "x2", 0.25 + 0.05 + 0.1},
		{"arith", "7+5=", "abc", 0.05},
		{"arith", "7+5=", "?????", 0},
		// arith: negative target "-5".
		{"arith", "3-8=", "-5", 1},
		{"arith", "3-8=", "5", 0.25 + 0.05 + 0.05},
		{"arith", "3-8=", "-4", 0.25 + 0.1 + 0.1},
		{"arith", "9-9=", "0", 1},
	}
	for _, c := range cases {
		got := score(t, mustGet(t, c.task), c.text, c.answer)
		if !near(got, c.want) {
			t.Errorf("%s %q answer %q: reward %v, want %v", c.task, c.text, c.answer, got, c.want)
		}
	}
}

func TestBadPrompts(t *testing.T) {
	cases := []struct{ task, text string }{
		{"reverse", "rev abz="},
		{"reverse", "rev ="},
		{"reverse", "rev abc"},
		{"reverse", "sort abc="},
		{"reverse", "rev abcdeab="}, // longer than MaxTokensPerTurn
		{"arith", "7*5="},
		{"arith", "7+5"},
		{"arith", "+5="},
		{"arith", "10+5="}, // operand above MaxOperand
		{"arith", "-3+5="},
		{"guess", "guess 1-21:"},
		{"guess", "guess 1-1:"},
		{"guess", "guess 0-20:"},
	}
	for _, c := range cases {
		env := mustGet(t, c.task).NewEnv()
		if _, err := env.Reset(Prompt{Text: c.text}); !errors.Is(err, ErrBadPrompt) || !strings.Contains(err.Error(), c.text) {
			t.Errorf("%s Reset(%q): err = %v, want ErrBadPrompt naming the text", c.task, c.text, err)
		}
		if _, _, _, err := env.Step("x"); !errors.Is(err, ErrNotReset) {
			t.Errorf("%s Step after failed Reset: err = %v, want ErrNotReset", c.task, err)
		}
	}
}

func TestStepBeforeReset(t *testing.T) {
	for _, n := range builtins {
		if _, _, _, err := mustGet(t, n).NewEnv().Step("1"); !errors.Is(err, ErrNotReset) {
			t.Errorf("%s: err = %v, want ErrNotReset", n, err)
		}
	}
}

// TestSeedDeterminism: a seed alone reproduces Sample's prompt, and the same
// rng state samples the same prompts.
func TestSeedDeterminism(t *testing.T) {
	for _, n := range builtins {
		task := mustGet(t, n)
		a, b := rand.New(rand.NewPCG(7, 7)), rand.New(rand.NewPCG(7, 7))
		for range 50 {
			p, q := task.Sample(a), task.Sample(b)
			if p != q {
				t.Fatalf("%s: same rng gave %+v and %+v", n, p, q)
			}
			obs, err := task.NewEnv().Reset(Prompt{Seed: p.Seed})
			if err != nil || obs != p.Text {
				t.Fatalf("%s: Reset(seed only) = %q, %v; want %q", n, obs, err, p.Text)
			}
			if len(p.Text) > 16 || !printable(p.Text) {
				t.Fatalf("%s: prompt %q is not short printable ASCII", n, p.Text)
			}
		}
	}
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7E {
			return false
		}
	}
	return true
}

func TestWinReward(t *testing.T) {
	for _, c := range []struct {
		turn, maxTurns int
		want           float64
	}{
		{1, 1, 0.8},   // one-turn episode: the whole win
		{1, 10, 0.8},  // solved on the first turn
		{10, 10, 0.5}, // solved on the last turn
		{4, 7, 0.65},  // halfway: 0.5 + 0.3·3/6
	} {
		if got := winReward(c.turn, c.maxTurns); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("winReward(%d, %d) = %v, want %v", c.turn, c.maxTurns, got, c.want)
		}
	}
}
