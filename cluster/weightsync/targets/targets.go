package targets

import (
	"fmt"

	"github.com/asyncrl/asyncrl/actors/publisher/tracker"
)

// Outcome is how the agent's work on a target ended.
type Outcome uint8

// Outcomes of a target.
const (
	// Loaded: the engine serves the target (and it was acked).
	Loaded Outcome = iota + 1
	// Failed: fetching, applying, loading or acking failed; the engine
	// keeps what it had.
	Failed
	// Closed: the engine was stopped (weightsync.ErrEngineGone): gone for good.
	Closed
)

func (o Outcome) String() string {
	switch o {
	case Loaded:
		return "loaded"
	case Failed:
		return "failed"
	case Closed:
		return "closed"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// noFailure is failed's value when no target failed: below every
// version, NoVersion included.
const noFailure = tracker.NoVersion - 1

// State is one engine agent's targets. The zero value is not usable;
// see New.
type State struct {
	want, have, failed int64
	gone               bool
}

// New returns the state of an agent whose engine holds version have
// (tracker.NoVersion for an engine that holds no version of the run
// yet, so that target 0, the run's base, is loaded too).
func New(have int64) State {
	return State{want: have, have: have, failed: noFailure}
}

// Dispatch raises the target to t (a target that failed is tried again).
func (s *State) Dispatch(t int64) {
	if t == s.failed && s.have == t {
		s.have, s.failed = t-1, noFailure
	}
	s.want = max(s.want, t)
}

// Next is the target to work on now; false when there is none.
func (s *State) Next() (int64, bool) {
	if s.gone || s.want <= s.have {
		return 0, false
	}
	return s.want, true
}

// Handled records target t's outcome.
func (s *State) Handled(t int64, o Outcome) {
	s.have, s.failed = t, noFailure
	if o != Loaded {
		s.failed = t
	}
	s.gone = s.gone || o == Closed
}

// Idle says whether every target dispatched was handled (or the engine
// is gone).
func (s *State) Idle() bool { return s.gone || s.want <= s.have }

// Gone says whether the engine was stopped for good.
func (s *State) Gone() bool { return s.gone }

// Reack says whether the version the engine serves should be acked again
// for a repeated command of version v, and which version that is.
func (s *State) Reack(v int64) (int64, bool) {
	ok := !s.gone && s.want <= s.have && s.have >= v && s.have >= 0 && s.failed != s.have
	return s.have, ok
}

// String is the state for logs and tests.
func (s State) String() string {
	f := "none"
	if s.failed != noFailure {
		f = fmt.Sprint(s.failed)
	}
	return fmt.Sprintf("want=%d have=%d failed=%s gone=%v", s.want, s.have, f, s.gone)
}
