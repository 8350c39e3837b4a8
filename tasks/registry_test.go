package tasks

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// builtins are the tasks this package registers; tests iterate over them
// rather than Names(), which also holds tasks other tests register.
var builtins = []string{"arith", "copy", "gridwalk", "guess", "reverse", "sort"}

func TestGetUnknownListsNames(t *testing.T) {
	_, err := Get("nope")
	if !errors.Is(err, ErrUnknownTask) {
		t.Fatalf("err = %v, want ErrUnknownTask", err)
	}
	for _, n := range builtins {
		if !strings.Contains(err.Error(), n) {
			t.Errorf("error %q does not list %q", err, n)
		}
	}
}

type fakeTask struct {
	name        string
	turns, toks int
}

func (f fakeTask) Name() string                 { return f.name }
func (f fakeTask) MaxTurns() int                { return f.turns }
func (f fakeTask) MaxTokensPerTurn() int        { return f.toks }
func (f fakeTask) Sample(rng *rand.Rand) Prompt { return Prompt{} }
func (f fakeTask) NewEnv() Env                  { return nil }

func TestRegister(t *testing.T) {
	custom := fakeTask{"registry-test-custom", 1, 4}
	if err := Register(custom); err != nil {
		t.Fatal(err)
	}
	if got, err := Get(custom.name); err != nil || got != Task(custom) {
		t.Fatalf("Get = %v, %v", got, err)
	}
	if err := Register(custom); !errors.Is(err, ErrDuplicateTask) {
		t.Errorf("duplicate: err = %v", err)
	}
	for _, bad := range []Task{nil, fakeTask{"", 1, 1}, fakeTask{" x", 1, 1}, fakeTask{"zero-turns", 0, 1}, fakeTask{"zero-toks", 1, 0}} {
		if err := Register(bad); !errors.Is(err, ErrInvalidTask) {
			t.Errorf("Register(%#v): err = %v, want ErrInvalidTask", bad, err)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	l := DefaultReverseConfig()
	l.Alphabet = "aba"
	a := DefaultArithConfig()
	a.Ops = "*"
	g := DefaultGuessConfig()
	g.MaxTurns = 0
	l2 := DefaultSortConfig()
	l2.MaxTokensPerTurn = 3
	cases := []struct {
		err   error
		field string
	}{
		{func() error { _, err := NewLetterTask(l); return err }(), "Alphabet"},
		{func() error { _, err := NewLetterTask(l2); return err }(), "MaxTokensPerTurn"},
		{func() error { _, err := NewArithTask(a); return err }(), "Ops"},
		{func() error { _, err := NewGuessTask(g); return err }(), "MaxTurns"},
	}
	for _, c := range cases {
		if !errors.Is(c.err, ErrInvalidTask) || !strings.Contains(c.err.Error(), c.field) {
			t.Errorf("err = %v, want ErrInvalidTask naming %s", c.err, c.field)
		}
	}
}
