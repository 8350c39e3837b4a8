package fence

import (
	"cmp"
	"slices"
)

// Rule is the rank host's pure rule: which term's requests it serves
// and which hosted groups end. A term's requests carry its fencing token;
// the first of a newer term ends every group of older ones before it is
// served, an older term is refused; a holder runs one group at a time, so
// its new group ends its other ones here (a kill that overtook a start,
// or one the bus lost, leaves no ranks behind); a group whose holder left
// the membership ends. The Host carries the verdicts out (it kills the
// ranks of every Ended group); Rule has no locks, goroutines or I/O.
type Rule struct {
	token  uint64           // the newest term's token seen
	groups map[string]Ended // hosted group id → its owner and term
}

// Ended names a group to end: its id, its holder and its term's token.
type Ended struct {
	Group, Owner string
	Token        uint64
}

// NewRule returns a host's rule with no term seen and no group.
func NewRule() *Rule { return &Rule{groups: map[string]Ended{}} }

// Token is the newest term's token seen.
func (f *Rule) Token() uint64 { return f.token }

// Observe records a term of token (a request of it, or this node's own
// term). ok is false for a term older than one seen (refuse it); ended
// are the groups of older terms, to end before the term is served.
func (f *Rule) Observe(token uint64) (ok bool, ended []Ended) {
	if token < f.token {
		return false, nil
	}
	if token > f.token {
		f.token = token
		ended = f.take(func(g Ended) bool { return g.Token < token })
	}
	return true, ended
}

// Register records that group's ranks started for owner's term token.
// ok is false when a newer term was seen while they started (end the new
// ranks; nothing is recorded); ended are the group this id named before
// and the owner's other groups.
func (f *Rule) Register(group, owner string, token uint64) (ok bool, ended []Ended) {
	if token < f.token {
		return false, nil
	}
	ended = f.take(func(g Ended) bool { return g.Group == group || g.Owner == owner })
	f.groups[group] = Ended{Group: group, Owner: owner, Token: token}
	return true, ended
}

// Remove forgets a group its holder ended (its last rank killed).
func (f *Rule) Remove(group string) { delete(f.groups, group) }

// Departed are the groups whose owner is no longer a live member.
func (f *Rule) Departed(alive func(node string) bool) []Ended {
	return f.take(func(g Ended) bool { return !alive(g.Owner) })
}

// take removes and returns, by group id, the groups match selects.
func (f *Rule) take(match func(Ended) bool) []Ended {
	var out []Ended
	for id, g := range f.groups {
		if match(g) {
			out = append(out, g)
			delete(f.groups, id)
		}
	}
	slices.SortFunc(out, func(a, b Ended) int { return cmp.Compare(a.Group, b.Group) })
	return out
}
