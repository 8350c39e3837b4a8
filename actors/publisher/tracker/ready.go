package tracker

import (
	"fmt"
	"slices"
	"strings"
)

// Outcome is how an awaited publish settled.
type Outcome int

const (
	// Routable: some engine serves the version (or a later one), so the
	// router can send traffic at it.
	Routable Outcome = iota + 1
	// NoEngine: no engine can still reach the version: every engine
	// behind it failed it (Failed) or there is none (they left).
	NoEngine
)

func (o Outcome) String() string {
	switch o {
	case Routable:
		return "routable"
	case NoEngine:
		return "no engine"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Settled is one awaited version and how its publish settled.
type Settled struct {
	Version int64
	Outcome Outcome
}

// Ready is what the tracker decided since the last Advance, for its shell
// to carry out: raise the router's minimum version to MinVersion (and
// announce it), and answer each settled publish. A stepper that never
// awaits a version gets no Settled and may ignore Ready; MinVersion is one
// value, so an untaken Ready does not grow.
type Ready struct {
	// MinVersion is the router's new minimum routable version, or
	// NoVersion when it did not rise.
	MinVersion int64
	// Settled lists the awaited versions that settled, by version.
	Settled []Settled
}

// Empty reports whether there is nothing to carry out.
func (r Ready) Empty() bool { return r.MinVersion == NoVersion && len(r.Settled) == 0 }

// String is a deterministic one-line form for logs and golden files.
func (r Ready) String() string {
	if r.Empty() {
		return "ready: nothing"
	}
	var parts []string
	if r.MinVersion != NoVersion {
		parts = append(parts, fmt.Sprintf("router min %d", r.MinVersion))
	}
	for _, s := range r.Settled {
		parts = append(parts, fmt.Sprintf("version %d %s", s.Version, s.Outcome))
	}
	return "ready: " + strings.Join(parts, ", ")
}

// Ready returns what the tracker decided since the last Advance.
func (t *Tracker) Ready() Ready {
	r := t.ready
	r.Settled = slices.Clone(r.Settled)
	return r
}

// Advance forgets the Ready the shell took.
func (t *Tracker) Advance() { t.ready = Ready{MinVersion: NoVersion} }

// RouterMin is the minimum version the router was told (through
// Ready.MinVersion): MinRoutable once some engine serves it, never lower
// than before.
func (t *Tracker) RouterMin() int64 { return t.routerMin }

// Awaiting lists the awaited versions not yet settled, ascending.
func (t *Tracker) Awaiting() []int64 { return slices.Clone(t.awaiting) }

// Failed records that an engine could not reach version: it stays out of
// rotation until a later ack, and counts no more as an engine that may
// still reach an awaited version ≤ version. A later version is
// dispatched to it again (Publish commands every engine behind).
func (t *Tracker) Failed(name string, version int64) error {
	e, ok := t.engines[name]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownEngine, name)
	}
	if version < 0 || version > t.Target() {
		return fmt.Errorf("%w: engine %s failed %d, target is %d", ErrUnknownVersion, name, version, t.Target())
	}
	e.failed = max(e.failed, version)
	if e.fetching != NoVersion && e.fetching <= version {
		e.fetching = NoVersion
	}
	t.decide()
	return nil
}

// Await asks for version's publish to settle: Ready.Settled reports it
// Routable once some engine serves it or a later version, or NoEngine
// once no engine can still get there. It may settle at once (in the
// Ready of this call). Awaiting a version already awaited does nothing
// more; awaiting one again after it settled (the trainer retries a
// publish that failed) settles it again.
func (t *Tracker) Await(version int64) error {
	if version < 0 || version > t.Target() {
		return fmt.Errorf("%w: await %d, target is %d", ErrUnknownVersion, version, t.Target())
	}
	if i, found := slices.BinarySearch(t.awaiting, version); !found {
		t.awaiting = slices.Insert(t.awaiting, i, version)
	}
	t.decide()
	return nil
}

// PublishAwait is a trainer's publish of version info.Version: a new
// version (target+1) is published (the commands are Publish's); the
// target itself is a retry of a publish that failed, published already:
// every engine behind it that failed it gets a command again (its failure
// is forgotten, so the version is awaited from it once more), while one
// still on its way or one that never failed it gets none. Either way the
// version is awaited (Await).
func (t *Tracker) PublishAwait(info VersionInfo) ([]Command, error) {
	var cmds []Command
	if retry := info.Version == t.Target() && info.Version > 0; retry {
		cmds = t.retry(info.Version)
	} else {
		var err error
		if cmds, err = t.Publish(info); err != nil {
			return nil, err
		}
	}
	return cmds, t.Await(info.Version)
}

// retry commands again every engine that failed version v (the target)
// and serves less, sorted by engine, and forgets those failures: a
// transient failure (an engine briefly unreachable) must not keep the
// version out of reach of the engine for good.
func (t *Tracker) retry(v int64) []Command {
	var cmds []Command
	for _, name := range t.engineNames() {
		e := t.engines[name]
		if e.serving >= v || e.failed < v || e.fetching != NoVersion {
			continue
		}
		e.failed = NoVersion
		cmds = append(cmds, Command{Engine: name, Plan: t.plan(e.serving)})
	}
	return cmds
}

// decide takes the two decisions every transition may change: raise the
// router's minimum, and settle awaited versions.
func (t *Tracker) decide() {
	t.raiseMin()
	t.settle()
}

// raiseMin moves the router's minimum up to MinRoutable once some engine
// serves it: never down, and never to a fleet with no routable engine
// (while the first receiver is still loading, the engines behind keep
// the traffic).
func (t *Tracker) raiseMin() {
	if t.minRoutable <= t.routerMin {
		return
	}
	for _, e := range t.engines {
		if e.serving >= t.minRoutable {
			t.routerMin = t.minRoutable
			t.ready.MinVersion = t.routerMin
			return
		}
	}
}

// settle reports each awaited version that some engine serves (Routable)
// or that no engine can still reach (NoEngine: every engine serves less
// and failed it or later).
func (t *Tracker) settle() {
	kept := t.awaiting[:0]
	for _, v := range t.awaiting {
		out := NoEngine
		for _, e := range t.engines {
			if e.serving >= v {
				out = Routable
				break
			}
			if e.failed < v {
				out = 0 // this one may still get there
			}
		}
		if out == 0 {
			kept = append(kept, v)
			continue
		}
		t.ready.Settled = append(t.ready.Settled, Settled{Version: v, Outcome: out})
	}
	t.awaiting = kept
}
