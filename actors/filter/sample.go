package filter

import (
	"errors"
	"fmt"
	"slices"
)

// ErrMixedGroup is returned by Decide when a group's samples carry more
// than one UID, or the group is empty.
var ErrMixedGroup = errors.New("filter: group must be non-empty with one uid")

// Sample is what the filter needs of one trajectory. The filter never moves
// trajectory data itself: it answers with indices (handles) into the
// caller's slice, so logprobs, routes and token data move together.
type Sample struct {
	// UID identifies the group (prompt) the trajectory belongs to.
	UID string
	// TokenRewards are the per-token rewards; the trajectory's score is
	// their sum (a scalar outcome reward is a one-element slice).
	TokenRewards []float64
	// LossMask is the per-token loss mask; nil means live. Only
	// zero_variance_mask looks at it.
	LossMask []float64
}

// Scalar is a Sample whose score is r (one token reward).
func Scalar(uid string, r float64) Sample { return Sample{UID: uid, TokenRewards: []float64{r}} }

// Score is the sum of the token rewards.
func (s Sample) Score() float64 {
	var sum float64
	for _, r := range s.TokenRewards {
		sum += r
	}
	return sum
}

// Live reports sum(loss_mask) > 0; a nil mask is live.
func (s Sample) Live() bool {
	if s.LossMask == nil {
		return true
	}
	var sum float64
	for _, m := range s.LossMask {
		sum += m
	}
	return sum > 0
}

// group is one uid's trajectories, by index into the batch.
type group struct {
	uid     string
	indices []int
}

// groupsOf splits a batch by uid, in order of first appearance.
func groupsOf(samples []Sample) []group {
	pos := map[string]int{}
	var gs []group
	for i, s := range samples {
		g, ok := pos[s.UID]
		if !ok {
			g = len(gs)
			pos[s.UID] = g
			gs = append(gs, group{uid: s.UID})
		}
		gs[g].indices = append(gs[g].indices, i)
	}
	return gs
}

// hasVariance is "population std of the scores > 0". In exact arithmetic
// that is "not all equal"; we test that directly because numpy can report
// a std of ~1e-17 for identical floats, which would keep a group that
// carries no learning signal.
func hasVariance(samples []Sample, idx []int) bool {
	first := samples[idx[0]].Score()
	for _, i := range idx[1:] {
		if samples[i].Score() != first {
			return true
		}
	}
	return false
}

// good is DAPO's keep rule: std > 0, or n_samples_per_prompt == 1. A group
// holding a single trajectory counts as the n == 1 case, as in SkyRL (which
// keeps a uid whose value list has length 1; the reference vector
// [1,2,3,3,5]/[u1,u1,u2,u2,u3] → [0,1,4] keeps the singleton u3).
func good(samples []Sample, idx []int, n int) bool {
	keep, _ := verdict(samples, idx, n)
	return keep
}

// verdict is the keep rule of good with the reason Decide reports.
func verdict(samples []Sample, idx []int, n int) (keep bool, why Reason) {
	switch {
	case n == 1 || len(idx) == 1:
		return true, ReasonSingleSample
	case hasVariance(samples, idx):
		return true, ReasonHasVariance
	}
	return false, ReasonZeroVariance
}

// KeepIndices is DAPO's per-batch filter: the indices (ascending) of the
// trajectories whose group has score std > 0 or a single trajectory, or all
// of them when n == 1.
func KeepIndices(samples []Sample, n int) []int {
	return indicesWhere(samples, func(idx []int) bool { return good(samples, idx, n) })
}

// ZeroVarianceMask returns the indices (ascending) of the trajectories whose
// loss must be masked: those of groups with more than one live trajectory
// (sum(loss_mask) > 0) whose live scores span max − min ≤ tol. A group with
// one or no live trajectory is kept. The batch size does not change.
func ZeroVarianceMask(samples []Sample, tol float64) []int {
	return indicesWhere(samples, func(idx []int) bool { return zeroVariance(samples, idx, tol) })
}

// indicesWhere returns, ascending, the indices of the trajectories whose
// group (by uid) satisfies pred; nil when none does.
func indicesWhere(samples []Sample, pred func(idx []int) bool) []int {
	var out []int
	for _, g := range groupsOf(samples) {
		if pred(g.indices) {
			out = append(out, g.indices...)
		}
	}
	slices.Sort(out)
	return out
}

func zeroVariance(samples []Sample, idx []int, tol float64) bool {
	live, lo, hi := liveRange(samples, idx)
	return live > 1 && hi-lo <= tol
}

// liveRange counts the live trajectories among idx and the span [lo, hi]
// of their scores (0, 0 when none is live).
func liveRange(samples []Sample, idx []int) (live int, lo, hi float64) {
	for _, i := range idx {
		if !samples[i].Live() {
			continue
		}
		s := samples[i].Score()
		if live == 0 || s < lo {
			lo = s
		}
		if live == 0 || s > hi {
			hi = s
		}
		live++
	}
	return live, lo, hi
}

// Reason says why Decide kept or dropped a group.
type Reason string

const (
	ReasonModeNone     Reason = "mode_none"     // kept: no filtering
	ReasonHasVariance  Reason = "has_variance"  // kept: scores differ
	ReasonSingleSample Reason = "single_sample" // kept: n_samples_per_prompt == 1 or a one-trajectory group
	ReasonFewLive      Reason = "few_live"      // kept: ≤ 1 live trajectory (zero_variance_mask)
	ReasonZeroVariance Reason = "zero_variance" // dropped: all scores equal (within tol)
)

// GroupDecision is the per-group verdict used by the async loop.
type GroupDecision struct {
	UID    string
	Keep   bool
	Reason Reason
}

func (d GroupDecision) String() string {
	verb := "drop"
	if d.Keep {
		verb = "keep"
	}
	return fmt.Sprintf("%s uid=%s reason=%s", verb, d.UID, d.Reason)
}

// Decide judges one complete group, as the async loop does group by group.
// A Drop means: release the group's capacity (staleness.Controller.Filter)
// and count its prompt as consumed. In replace mode a bad group is dropped
// too — replacement needs a whole batch (use Replace); in filter mode the
// accumulation across batches is the trainer's mini-batch assembly.
func (c Config) Decide(grp []Sample) (GroupDecision, error) {
	if len(grp) == 0 {
		return GroupDecision{}, fmt.Errorf("decide: empty group: %w", ErrMixedGroup)
	}
	uid := grp[0].UID
	idx := make([]int, len(grp))
	for i, s := range grp {
		if s.UID != uid {
			return GroupDecision{}, fmt.Errorf("decide: uids %q and %q in one group: %w", uid, s.UID, ErrMixedGroup)
		}
		idx[i] = i
	}
	d := GroupDecision{UID: uid, Keep: true}
	switch c.Mode {
	case ModeNone:
		d.Reason = ReasonModeNone
	case ModeFilter, ModeReplace:
		d.Keep, d.Reason = verdict(grp, idx, c.NSamplesPerPrompt)
	case ModeZeroVarianceMask:
		// One pass over the group for both the live count and the score span.
		switch live, lo, hi := liveRange(grp, idx); {
		case live <= 1:
			d.Reason = ReasonFewLive
		case hi-lo <= c.ZeroVarianceTol:
			d.Keep, d.Reason = false, ReasonZeroVariance
		default:
			d.Reason = ReasonHasVariance
		}
	default:
		return GroupDecision{}, fmt.Errorf("decide: %w: mode %q", ErrInvalidConfig, c.Mode)
	}
	return d, nil
}
