package filter

import (
	"errors"
	"fmt"
	"math"
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

// hasVariance is "population std of the scores > 0" for NaN-free scores.
// In exact arithmetic that is "not all equal"; we test that directly
// because numpy can report a std of ~1e-17 for identical floats (three
// 0.1s), which would keep a group that carries no learning signal.
func hasVariance(samples []Sample, idx []int) bool {
	first := samples[idx[0]].Score()
	for _, i := range idx[1:] {
		if samples[i].Score() != first {
			return true
		}
	}
	return false
}

// hasNaN reports a NaN score among idx: numpy's std of it is NaN, and
// NaN > 0 is false, so SkyRL's filter drops such a group.
func hasNaN(samples []Sample, idx []int) bool {
	for _, i := range idx {
		if math.IsNaN(samples[i].Score()) {
			return true
		}
	}
	return false
}

// good is DAPO's keep rule: std > 0, or n_samples_per_prompt == 1
// (skyrl-train trainer_utils.py handle_filter_sampling and
// handle_replace_sampling: `std > 0 or n_samples_per_prompt == 1`). A
// group that arrived with a single trajectory while n > 1 has std 0 and is
// bad; a NaN score gives std NaN and is bad.
func good(samples []Sample, idx []int, n int) bool {
	keep, _ := verdict(samples, idx, n)
	return keep
}

// verdict is the keep rule of good with the reason Decide reports.
func verdict(samples []Sample, idx []int, n int) (keep bool, why Reason) {
	switch {
	case n == 1:
		return true, ReasonSingleSample
	case hasNaN(samples, idx):
		return false, ReasonNaN
	case len(idx) == 1:
		return false, ReasonSingleTrajectory
	case hasVariance(samples, idx):
		return true, ReasonHasVariance
	}
	return false, ReasonZeroVariance
}

// KeepIndices is DAPO's per-batch filter: the indices (ascending) of the
// trajectories whose group has score std > 0, or all of them when n == 1.
func KeepIndices(samples []Sample, n int) []int {
	return indicesWhere(samples, func(idx []int) bool { return good(samples, idx, n) })
}

// ZeroVarianceMask returns the indices (ascending) of the trajectories whose
// loss must be masked: those of groups with more than one live trajectory
// (sum(loss_mask) > 0) whose live scores span max − min ≤ tol, and those
// of groups with a NaN live score (SkyRL's max − min ≤ tol is false for
// NaN and would train on it; see docs/semantics.md). A group with one or
// no live trajectory is kept (skyrl-train trainer_utils.py
// zero_variance_filter). The batch size does not change.
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
	live, lo, hi, nan := liveRange(samples, idx)
	return nan || live > 1 && hi-lo <= tol
}

// liveRange counts the live trajectories among idx and the span [lo, hi]
// of their scores (0, 0 when none is live); nan reports a NaN live score.
func liveRange(samples []Sample, idx []int) (live int, lo, hi float64, nan bool) {
	for _, i := range idx {
		if !samples[i].Live() {
			continue
		}
		s := samples[i].Score()
		if math.IsNaN(s) {
			nan = true
			continue
		}
		if live == 0 || s < lo {
			lo = s
		}
		if live == 0 || s > hi {
			hi = s
		}
		live++
	}
	return live, lo, hi, nan
}

// Reason says why Decide kept or dropped a group.
type Reason string

const (
	ReasonModeNone         Reason = "mode_none"         // kept: no filtering
	ReasonHasVariance      Reason = "has_variance"      // kept: scores differ
	ReasonSingleSample     Reason = "single_sample"     // kept: n_samples_per_prompt == 1
	ReasonFewLive          Reason = "few_live"          // kept: ≤ 1 live trajectory (zero_variance_mask)
	ReasonZeroVariance     Reason = "zero_variance"     // bad: all scores equal (within tol)
	ReasonSingleTrajectory Reason = "single_trajectory" // bad: one trajectory while n_samples_per_prompt > 1 (std 0)
	ReasonNaN              Reason = "nan_score"         // bad: a NaN score (std NaN)
)

// GroupDecision is the per-group verdict used by the async loop.
type GroupDecision struct {
	UID string
	// Keep: forward the group. False in filter mode for a bad group (drop
	// it and release its capacity) and in replace mode for a bad group (its
	// slot is filled with a good group's copy at mini-batch assembly).
	Keep bool
	// Mask (zero_variance_mask): the group is kept but the loss mask of its
	// live trajectories must be zeroed.
	Mask   bool
	Reason Reason
}

func (d GroupDecision) String() string {
	verb := "drop"
	switch {
	case d.Keep && d.Mask:
		verb = "mask"
	case d.Keep:
		verb = "keep"
	}
	return fmt.Sprintf("%s uid=%s reason=%s", verb, d.UID, d.Reason)
}

// Decide judges one complete group, as the async loop does group by group.
// A Drop means: release the group's capacity (staleness.Controller.Filter)
// and count its prompt as consumed. In replace mode a bad group is dropped
// too, and its slot in the generation batch is filled at mini-batch
// assembly (ReplaceSlots); in filter mode the accumulation across
// generation batches is the controller's mini-batch assembly. In
// zero_variance_mask mode every group is kept; Mask says whether its live
// trajectories' loss must be zeroed (judged on the loss masks grp carries).
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
		switch live, lo, hi, nan := liveRange(grp, idx); {
		case nan:
			d.Mask, d.Reason = true, ReasonNaN
		case live <= 1:
			d.Reason = ReasonFewLive
		case hi-lo <= c.ZeroVarianceTol:
			d.Mask, d.Reason = true, ReasonZeroVariance
		default:
			d.Reason = ReasonHasVariance
		}
	default:
		return GroupDecision{}, fmt.Errorf("decide: %w: mode %q", ErrInvalidConfig, c.Mode)
	}
	return d, nil
}
