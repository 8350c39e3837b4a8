package outcome

import (
	"errors"
	"fmt"
)

// ErrOutOfOrder is wrapped by the error of an input the stage refuses.
var ErrOutOfOrder = errors.New("outcome: input out of order")

// Stage is where a group stands.
type Stage uint8

// Stages, in order; Ready and Aborted are final.
const (
	Running Stage = iota // episodes still running
	Packing              // every episode finished: pack it (Packed)
	Storing              // packed, storing in the trajectory buffer (Stored)
	Ready                // publish GroupReady (or it is stored)
	Aborted              // send Aborts(): the controller requeues the prompt
)

func (s Stage) String() string {
	switch s {
	case Running:
		return "running"
	case Packing:
		return "packing"
	case Storing:
		return "storing"
	case Ready:
		return "ready"
	case Aborted:
		return "aborted"
	}
	return fmt.Sprintf("Stage(%d)", uint8(s))
}

// MemberAborted is the reason reported for a finished episode of a group
// another episode of which aborted.
const MemberAborted = "group member aborted"

// Abort is one EpisodeAborted report: Index is the trajectory's index in
// the group, −1 for a report of the whole group.
type Abort struct {
	Index  int
	Reason string
}

// Group is one group's fate. The zero value is not usable; see New.
type Group struct {
	stage    Stage
	ended    []bool
	reasons  []string // per episode: "" finished, else why it aborted
	left     int
	failed   bool
	group    string // the whole group's abort reason (pack or store)
	unstored bool
}

// New returns the fate of a group of n ≥ 1 episodes, all running.
func New(n int) *Group {
	n = max(n, 1)
	return &Group{ended: make([]bool, n), reasons: make([]string, n), left: n}
}

// Stage is where the group stands.
func (g *Group) Stage() Stage { return g.stage }

// Ended records that episode i ended: finished when reason is "", else
// aborted for reason. The last one decides: Packing, or Aborted.
func (g *Group) Ended(i int, reason string) (Stage, error) {
	switch {
	case g.stage != Running:
		return g.stage, fmt.Errorf("%w: episode %d ended while the group is %s", ErrOutOfOrder, i, g.stage)
	case i < 0 || i >= len(g.ended):
		return g.stage, fmt.Errorf("%w: episode %d of a group of %d", ErrOutOfOrder, i, len(g.ended))
	case g.ended[i]:
		return g.stage, fmt.Errorf("%w: episode %d ended twice", ErrOutOfOrder, i)
	}
	g.ended[i], g.reasons[i] = true, reason
	g.failed = g.failed || reason != ""
	g.left--
	if g.left == 0 {
		g.stage = Packing
		if g.failed {
			g.stage = Aborted
		}
	}
	return g.stage, nil
}

// Packed records the packing's result (err "" when packed); buffered
// says whether the group goes to a trajectory buffer (Storing) or is
// published plainly (Ready).
func (g *Group) Packed(err string, buffered bool) (Stage, error) {
	if g.stage != Packing {
		return g.stage, fmt.Errorf("%w: packed while the group is %s", ErrOutOfOrder, g.stage)
	}
	switch {
	case err != "":
		g.stage, g.group = Aborted, "pack: "+err
	case buffered:
		g.stage = Storing
	default:
		g.stage = Ready
	}
	return g.stage, nil
}

// Stored records the trajectory buffer's answer (err "" when stored, else
// the store gave up).
func (g *Group) Stored(err string) (Stage, error) {
	if g.stage != Storing {
		return g.stage, fmt.Errorf("%w: stored while the group is %s", ErrOutOfOrder, g.stage)
	}
	g.stage = Ready
	if err != "" {
		g.stage, g.group, g.unstored = Aborted, "trajectory buffer: "+err, true
	}
	return g.stage, nil
}

// Unstored says whether the group was aborted because its store failed.
func (g *Group) Unstored() bool { return g.unstored }

// Aborts are the EpisodeAborted reports of an Aborted group, in order
// (nil for any other stage).
func (g *Group) Aborts() []Abort {
	if g.stage != Aborted {
		return nil
	}
	if g.group != "" {
		return []Abort{{Index: -1, Reason: g.group}}
	}
	out := make([]Abort, len(g.reasons))
	for i, r := range g.reasons {
		if r == "" {
			r = MemberAborted
		}
		out[i] = Abort{Index: i, Reason: r}
	}
	return out
}
