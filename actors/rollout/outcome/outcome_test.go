package outcome

import (
	"errors"
	"fmt"
	"testing"
)

// in is one input: ended (i, reason), packed (err, buffered), stored (err).
type in struct {
	call     string
	i        int
	reason   string
	buffered bool
}

func step(g *Group, x in) (Stage, error) {
	switch x.call {
	case "ended":
		return g.Ended(x.i, x.reason)
	case "packed":
		return g.Packed(x.reason, x.buffered)
	case "stored":
		return g.Stored(x.reason)
	}
	panic("unknown call " + x.call)
}

func TestGroupOutcome(t *testing.T) {
	for _, tc := range []struct {
		name     string
		n        int
		ins      []in
		stages   []Stage // after each input
		aborts   string  // fmt of Aborts() at the end
		unstored bool
	}{
		{"all finish, no buffer: ready", 2,
			[]in{{call: "ended", i: 1}, {call: "ended", i: 0}, {call: "packed"}},
			[]Stage{Running, Packing, Ready}, "[]", false},
		{"all finish, stored: ready", 1,
			[]in{{call: "ended"}, {call: "packed", buffered: true}, {call: "stored"}},
			[]Stage{Packing, Storing, Ready}, "[]", false},
		{"one aborts: the group waits for the rest, then reports every trajectory", 3,
			[]in{{call: "ended", i: 1, reason: "turn timed out"}, {call: "ended", i: 0}, {call: "ended", i: 2}},
			[]Stage{Running, Running, Aborted},
			"[{0 group member aborted} {1 turn timed out} {2 group member aborted}]", false},
		{"two abort: each keeps its own reason", 2,
			[]in{{call: "ended", i: 0, reason: "a"}, {call: "ended", i: 1, reason: "b"}},
			[]Stage{Running, Aborted}, "[{0 a} {1 b}]", false},
		{"a packing error aborts the group with one report", 1,
			[]in{{call: "ended"}, {call: "packed", reason: "too long"}},
			[]Stage{Packing, Aborted}, "[{-1 pack: too long}]", false},
		{"a store that gave up aborts the group, unstored", 1,
			[]in{{call: "ended"}, {call: "packed", buffered: true}, {call: "stored", reason: "timeout"}},
			[]Stage{Packing, Storing, Aborted}, "[{-1 trajectory buffer: timeout}]", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := New(tc.n)
			for k, x := range tc.ins {
				st, err := step(g, x)
				if err != nil || st != tc.stages[k] || g.Stage() != st {
					t.Fatalf("input %d %+v: stage %s (Stage %s), err %v; want %s", k, x, st, g.Stage(), err, tc.stages[k])
				}
			}
			if got := fmt.Sprint(g.Aborts()); got != tc.aborts {
				t.Errorf("Aborts %s, want %s", got, tc.aborts)
			}
			if g.Unstored() != tc.unstored {
				t.Errorf("Unstored %v, want %v", g.Unstored(), tc.unstored)
			}
		})
	}
}

// TestOutOfOrderRefused: an input that does not fit the stage is an
// error wrapping ErrOutOfOrder and changes nothing.
func TestOutOfOrderRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		prep []in
		bad  in
	}{
		{"an episode ended twice", []in{{call: "ended", i: 0}}, in{call: "ended", i: 0, reason: "late abort"}},
		{"an episode out of range", nil, in{call: "ended", i: 5}},
		{"a negative episode", nil, in{call: "ended", i: -1}},
		{"packed while running", nil, in{call: "packed"}},
		{"stored before packing", []in{{call: "ended", i: 0}, {call: "ended", i: 1}}, in{call: "stored"}},
		{"an episode after the group was aborted", []in{{call: "ended", i: 0, reason: "x"}, {call: "ended", i: 1}}, in{call: "ended", i: 1}},
		{"stored twice", []in{{call: "ended", i: 0}, {call: "ended", i: 1}, {call: "packed", buffered: true}, {call: "stored"}}, in{call: "stored", reason: "y"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := New(2)
			for _, x := range tc.prep {
				if _, err := step(g, x); err != nil {
					t.Fatal(err)
				}
			}
			before, aborts := g.Stage(), fmt.Sprint(g.Aborts())
			st, err := step(g, tc.bad)
			if !errors.Is(err, ErrOutOfOrder) || st != before || g.Stage() != before || fmt.Sprint(g.Aborts()) != aborts {
				t.Fatalf("%+v: stage %s → %s, err %v; want refused, nothing changed", tc.bad, before, st, err)
			}
		})
	}
}
