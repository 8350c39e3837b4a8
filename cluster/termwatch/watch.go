package termwatch

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// ErrBadConfig wraps invalid configurations.
var ErrBadConfig = errors.New("termwatch: bad config")

// Config bounds how long a term may make no progress.
type Config struct {
	// StallAfter: the term steps down when no step completed for this long
	// since it started or since its last step (default 10m; a real RL step
	// can take minutes, so keep it well above the slowest step).
	StallAfter time.Duration
	// UnhealthyAfter: the term steps down when a dependency failed every
	// probe for this long (default 30s: a JetStream leader election after a
	// server's death takes 4–9 s).
	UnhealthyAfter time.Duration
	// StartAfter: the term steps down when it has not started (Started)
	// this long after it claimed the lease — its streams, its base
	// weights, an engine that loaded version 0 (default 5m: keep it above
	// the slowest start, a large checkpoint's download and upload and the
	// engines' first load). 0: no bound of its own (StallAfter still
	// counts from the claim).
	StartAfter time.Duration
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{StallAfter: 10 * time.Minute, UnhealthyAfter: 30 * time.Second, StartAfter: 5 * time.Minute}
}

// Validate names the field at fault.
func (c Config) Validate() error {
	if c.StallAfter <= 0 {
		return fmt.Errorf("%w: StallAfter %s (want > 0)", ErrBadConfig, c.StallAfter)
	}
	if c.UnhealthyAfter <= 0 {
		return fmt.Errorf("%w: UnhealthyAfter %s (want > 0)", ErrBadConfig, c.UnhealthyAfter)
	}
	if c.StartAfter < 0 {
		return fmt.Errorf("%w: StartAfter %s (want >= 0; 0 is no bound of its own)", ErrBadConfig, c.StartAfter)
	}
	return nil
}

// Reason says why a term stepped down.
type Reason string

// The reasons a term steps down.
const (
	NoStep     Reason = "no_step"
	Dependency Reason = "dependency"
	// NoStart: the term did not start within StartAfter of its claim.
	NoStart Reason = "no_start"
)

// Kind is an event's kind.
type Kind int

// The events a Watch emits.
const (
	// Failing: a dependency's probe failed after it was healthy.
	Failing Kind = iota + 1
	// Recovered: a failing dependency answered again (For: how long it failed).
	Recovered
	// StepDown: the term must give its lease up (Reason, For: how long).
	StepDown
)

// Event is one decision, for logs, metrics and tests.
type Event struct {
	Kind Kind
	// Dep is the dependency (Failing, Recovered, StepDown for Dependency).
	Dep string
	// Err is the probe's error (Failing, StepDown for Dependency).
	Err string
	// For is how long the condition lasted.
	For    time.Duration
	Reason Reason
}

// String is deterministic: what the node prints.
func (e Event) String() string {
	switch e.Kind {
	case Failing:
		return fmt.Sprintf("term dependency %s failing: %s", e.Dep, e.Err)
	case Recovered:
		return fmt.Sprintf("term dependency %s recovered after %s", e.Dep, e.For)
	case StepDown:
		switch e.Reason {
		case Dependency:
			return fmt.Sprintf("term stalled: %s failing for %s (%s); stepping down", e.Dep, e.For, e.Err)
		case NoStart:
			return fmt.Sprintf("term stalled: not started %s after its claim; stepping down", e.For)
		}
		return fmt.Sprintf("term stalled: no step for %s; stepping down", e.For)
	}
	return "term event ?"
}

type dep struct {
	failing bool
	since   time.Time // first failure of the current run of failures
	err     string
}

// Watch is the core. The zero value is not usable: use New.
type Watch struct {
	cfg      Config
	claimed  time.Time
	started  bool
	lastStep time.Time
	deps     map[string]*dep
	down     *Event
	events   []Event
}

// New returns a watch for a term that claimed the lease at now.
func New(cfg Config, now time.Time) (*Watch, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Watch{cfg: cfg, claimed: now, lastStep: now, deps: map[string]*dep{}}, nil
}

// Started records that the term started (its pipeline runs) at now.
func (w *Watch) Started(time.Time) { w.started = true }

// StepDone records a completed step at now.
func (w *Watch) StepDone(now time.Time) {
	if now.After(w.lastStep) {
		w.lastStep = now
	}
}

// Probe records one probe of dependency name at now: err nil is healthy.
func (w *Watch) Probe(now time.Time, name string, err error) {
	d := w.deps[name]
	if d == nil {
		d = &dep{}
		w.deps[name] = d
	}
	switch {
	case err == nil && d.failing:
		d.failing = false
		w.emit(Event{Kind: Recovered, Dep: name, For: now.Sub(d.since)})
	case err != nil && !d.failing:
		d.failing, d.since, d.err = true, now, err.Error()
		w.emit(Event{Kind: Failing, Dep: name, Err: d.err})
	case err != nil:
		d.err = err.Error()
	}
}

// Tick decides at now: once a step-down is due it is emitted once, and
// the watch stays down.
func (w *Watch) Tick(now time.Time) {
	if w.down != nil {
		return
	}
	if since := now.Sub(w.claimed); !w.started && w.cfg.StartAfter > 0 && since >= w.cfg.StartAfter {
		w.stepDown(Event{Kind: StepDown, Reason: NoStart, For: since})
		return
	}
	if idle := now.Sub(w.lastStep); idle >= w.cfg.StallAfter {
		w.stepDown(Event{Kind: StepDown, Reason: NoStep, For: idle})
		return
	}
	names := make([]string, 0, len(w.deps))
	for n := range w.deps {
		names = append(names, n)
	}
	slices.Sort(names) // deterministic: the first failing dependency by name
	for _, n := range names {
		d := w.deps[n]
		if d.failing && now.Sub(d.since) >= w.cfg.UnhealthyAfter {
			w.stepDown(Event{Kind: StepDown, Reason: Dependency, Dep: n, Err: d.err, For: now.Sub(d.since)})
			return
		}
	}
}

func (w *Watch) stepDown(e Event) {
	w.down = &e
	w.emit(e)
}

func (w *Watch) emit(e Event) { w.events = append(w.events, e) }

// Ready returns the events since the last call.
func (w *Watch) Ready() []Event {
	out := w.events
	w.events = nil
	return out
}

// Down reports whether the term must step down, and why.
func (w *Watch) Down() (Event, bool) {
	if w.down == nil {
		return Event{}, false
	}
	return *w.down, true
}

// Failing lists the dependencies failing now, by name.
func (w *Watch) Failing() []string {
	var out []string
	for n, d := range w.deps {
		if d.failing {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}
