package termwatch

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// op is one input to the watch in a scenario.
type op struct {
	at    float64
	step  bool
	dep   string
	err   string // "" healthy (with dep)
	tick  bool
	start bool
}

func TestScenarios(t *testing.T) {
	cfg := Config{StallAfter: 60 * time.Second, UnhealthyAfter: 20 * time.Second, StartAfter: 30 * time.Second}
	cases := []struct {
		name string
		ops  []op
		want []string // every event, in order
		down bool
	}{
		{"steps keep it healthy", []op{{at: 10, start: true}, {at: 50, step: true}, {at: 100, step: true}, {at: 159, tick: true}}, nil, false},
		{"not started within StartAfter steps down", []op{{at: 29, tick: true}, {at: 30, tick: true}, {at: 31, start: true}, {at: 40, tick: true}},
			[]string{"term stalled: not started 30s after its claim; stepping down"}, true},
		{"started in time: only StallAfter counts", []op{{at: 29, start: true}, {at: 59, tick: true}},
			nil, false},
		{"no step for StallAfter steps down once", []op{{at: 1, start: true}, {at: 10, step: true}, {at: 69, tick: true}, {at: 70, tick: true}, {at: 80, tick: true}},
			[]string{"term stalled: no step for 1m0s; stepping down"}, true},
		{"a dependency that recovers within the bound", []op{{at: 1, dep: "groups", err: "no leader"}, {at: 2, dep: "groups", err: "no leader"},
			{at: 9, dep: "groups"}, {at: 25, tick: true}},
			[]string{"term dependency groups failing: no leader", "term dependency groups recovered after 8s"}, false},
		{"a dependency failing for the bound steps down", []op{{at: 1, dep: "groups", err: "no leader"}, {at: 20, dep: "groups", err: "stream not found"},
			{at: 20.5, tick: true}, {at: 21, tick: true}},
			[]string{"term dependency groups failing: no leader", "term stalled: groups failing for 20s (stream not found); stepping down"}, true},
		{"the bound counts from the first failure of the current run", []op{{at: 0, start: true}, {at: 1, dep: "a", err: "x"}, {at: 5, dep: "a"}, {at: 10, dep: "a", err: "y"},
			{at: 29, tick: true}, {at: 30, tick: true}},
			[]string{"term dependency a failing: x", "term dependency a recovered after 4s", "term dependency a failing: y",
				"term stalled: a failing for 20s (y); stepping down"}, true},
		{"two failing dependencies: the first by name", []op{{at: 0, dep: "zeta", err: "z"}, {at: 0, dep: "alpha", err: "a"}, {at: 20, tick: true}},
			[]string{"term dependency zeta failing: z", "term dependency alpha failing: a", "term stalled: alpha failing for 20s (a); stepping down"}, true},
		{"a late step does not undo a step-down", []op{{at: 0, start: true}, {at: 61, tick: true}, {at: 62, step: true}, {at: 63, tick: true}},
			[]string{"term stalled: no step for 1m1s; stepping down"}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, err := New(cfg, t0)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range c.ops {
				switch {
				case o.start:
					w.Started(at(o.at))
				case o.step:
					w.StepDone(at(o.at))
				case o.dep != "":
					var perr error
					if o.err != "" {
						perr = errors.New(o.err)
					}
					w.Probe(at(o.at), o.dep, perr)
				case o.tick:
					w.Tick(at(o.at))
				}
				for _, e := range w.Ready() {
					got = append(got, e.String())
				}
			}
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
			if _, down := w.Down(); down != c.down {
				t.Errorf("down %v; want %v", down, c.down)
			}
		})
	}
}

func TestConfigValidated(t *testing.T) {
	for _, c := range []Config{{StallAfter: 0, UnhealthyAfter: time.Second}, {StallAfter: time.Second, UnhealthyAfter: -1},
		{StallAfter: time.Second, UnhealthyAfter: time.Second, StartAfter: -1}} {
		if _, err := New(c, t0); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%+v: err %v; want ErrBadConfig", c, err)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestFailing(t *testing.T) {
	w, _ := New(DefaultConfig(), t0)
	w.Probe(at(1), "b", errors.New("x"))
	w.Probe(at(1), "a", errors.New("x"))
	w.Probe(at(2), "b", nil)
	if f := w.Failing(); len(f) != 1 || f[0] != "a" {
		t.Errorf("failing %v; want [a]", f)
	}
	// An out-of-order StepDone does not move the last step back: the
	// stall bound counts from the newest step.
	w, _ = New(DefaultConfig(), t0)
	w.Started(at(1))
	w.StepDone(at(5))
	w.StepDone(at(3))
	w.Tick(at(5).Add(DefaultConfig().StallAfter - time.Second))
	if _, down := w.Down(); down {
		t.Errorf("down %s after the newest step; the bound is %s", DefaultConfig().StallAfter-time.Second, DefaultConfig().StallAfter)
	}
}

// Without a start bound of its own (StartAfter 0) a term that never
// starts is still caught by StallAfter, counted from its claim.
func TestNoStartBound(t *testing.T) {
	w, err := New(Config{StallAfter: time.Minute, UnhealthyAfter: time.Second}, t0)
	if err != nil {
		t.Fatal(err)
	}
	w.Tick(at(59))
	if _, down := w.Down(); down {
		t.Fatal("down before StallAfter")
	}
	w.Tick(at(60))
	if e, down := w.Down(); !down || e.Reason != NoStep {
		t.Fatalf("down %v %+v; want no_step at StallAfter", down, e)
	}
}
