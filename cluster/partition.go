package cluster

import (
	"fmt"
	"sort"
)

// The partition rule: a side of a network partition may train only while
// it holds a quorum of the known members, so two sides can never both
// train and fork the run.
//
// Known members are the voting membership: every node that joined and has
// not left gracefully. A node that died or became unreachable stays known
// (it may be alive on the other side of the partition), so the quorum does
// not shrink with what one side can see — a minority cannot vote itself a
// majority. A graceful leave (memberlist StateLeft) removes the node, and
// an operator can Forget a node that is gone for good.
//
// A side trains when it reaches a strict majority of the known members,
// or exactly half of them including the lowest-named known member (so an
// even split has exactly one winner, the same one on both sides). Two
// nodes are the awkward case: when the lower-named one dies, the other
// stops until an operator Forgets the dead one; three or more nodes ride
// out any single failure.
//
// The lease and the durable state back this rule up: with Replicas 3 the
// JetStream buckets need a majority of servers to accept a write, so a
// minority side cannot renew a lease or record a trained step either.

// QuorumVerdict says whether this side of the cluster may train.
type QuorumVerdict struct {
	// Train: this side holds the quorum.
	Train bool
	// Known and Reachable count the voting members and those of them this
	// node reaches (itself included).
	Known, Reachable int
	// Need is the strict majority (Known/2 + 1).
	Need int
	// Reason explains the verdict for logs and the CLI.
	Reason string
}

// DecideQuorum applies the partition rule to the known members and the
// members this node reaches (its live membership, itself included). Names
// in reachable that are not known do not count. Pure.
func DecideQuorum(known, reachable []string) QuorumVerdict {
	k := map[string]bool{}
	for _, n := range known {
		k[n] = true
	}
	r := map[string]bool{}
	for _, n := range reachable {
		if k[n] {
			r[n] = true
		}
	}
	v := QuorumVerdict{Known: len(k), Reachable: len(r), Need: len(k)/2 + 1}
	if len(k) == 0 {
		v.Reason = "no known members"
		return v
	}
	names := make([]string, 0, len(k))
	for n := range k {
		names = append(names, n)
	}
	sort.Strings(names)
	switch {
	case v.Reachable >= v.Need:
		v.Train = true
		v.Reason = fmt.Sprintf("majority: reach %d of %d known members", v.Reachable, v.Known)
	case 2*v.Reachable == v.Known && r[names[0]]:
		v.Train = true
		v.Reason = fmt.Sprintf("even split: reach %d of %d known members including %s, the lowest-named", v.Reachable, v.Known, names[0])
	default:
		v.Reason = fmt.Sprintf("minority: reach %d of %d known members, need %d; stop training rather than fork the run", v.Reachable, v.Known, v.Need)
	}
	return v
}

// Quorum tracks the known and reachable members from membership events
// and answers the partition rule. It is a pure core: the shell feeds it
// memberlist's join/leave/dead events; no locks, no clock.
type Quorum struct {
	known map[string]bool
	live  map[string]bool
}

// NewQuorum starts with this node known and live.
func NewQuorum(self string) *Quorum {
	return &Quorum{known: map[string]bool{self: true}, live: map[string]bool{self: true}}
}

// Joined records a member that joined (or came back).
func (q *Quorum) Joined(name string) { q.known[name], q.live[name] = true, true }

// Failed records a member that died or became unreachable: it stays known.
func (q *Quorum) Failed(name string) { delete(q.live, name) }

// Left records a graceful leave: the member no longer votes.
func (q *Quorum) Left(name string) { delete(q.live, name); delete(q.known, name) }

// Forget removes a dead member from the vote (operator action).
func (q *Quorum) Forget(name string) { q.Left(name) }

// Known returns the voting members, sorted.
func (q *Quorum) Known() []string { return sortedKeys(q.known) }

// Verdict applies DecideQuorum to the current view.
func (q *Quorum) Verdict() QuorumVerdict {
	return DecideQuorum(sortedKeys(q.known), sortedKeys(q.live))
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
