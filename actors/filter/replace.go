package filter

import "math/rand/v2"

// ReplaceResult is POLARIS replacement's answer.
type ReplaceResult struct {
	// Replaced: the batch is usable. False means good groups ≤ total ×
	// min_replace_ratio: discard the batch and sample again.
	Replaced bool
	// Source maps each output slot to the input trajectory it takes
	// (len(Source) == len(samples)); copy every per-trajectory field
	// (tokens, logprobs, routes, uid) from Source[i] to slot i. Identity
	// when !Replaced or nothing was bad.
	Source []int
	// GoodGroups and TotalGroups are the counts the ratio test used.
	GoodGroups, TotalGroups int
}

// Replace is POLARIS dynamic sampling (skyrl-train trainer_utils.py
// handle_replace_sampling and get_bad_sample_replacements). A group is good
// if its score std > 0 or n == 1 (a one-trajectory group with n > 1, or a
// NaN score, is bad). If good > total × ratio, every bad group is
// overwritten, position by position, with the trajectories of a randomly
// chosen good group (ReplaceSlots chooses the donors). The k-th trajectory
// of the bad group takes the (k mod size)-th trajectory of its donor. Good
// trajectories keep their slots.
func Replace(samples []Sample, n int, ratio float64, rng *rand.Rand) ReplaceResult {
	gs := groupsOf(samples)
	goodGroup := make([]bool, len(gs))
	goods := 0
	for i, g := range gs {
		goodGroup[i] = good(samples, g.indices, n)
		if goodGroup[i] {
			goods++
		}
	}
	res := ReplaceResult{Source: make([]int, len(samples)), GoodGroups: goods, TotalGroups: len(gs)}
	for i := range res.Source {
		res.Source[i] = i
	}
	ok, donor := ReplaceSlots(goodGroup, ratio, rng)
	if !ok {
		return res
	}
	res.Replaced = true
	for gi, g := range gs {
		if goodGroup[gi] {
			continue
		}
		src := gs[donor[gi]].indices
		for k, slot := range g.indices {
			res.Source[slot] = src[k%len(src)]
		}
	}
	return res
}

// EnoughGood is POLARIS' test: good > total × ratio, strictly.
func EnoughGood(good, total int, ratio float64) bool {
	return float64(good) > float64(total)*ratio
}

// ReplaceSlots is POLARIS replacement at the level of group slots, as the
// async loop's mini-batch assembly uses it: good[i] says whether slot i of
// a generation batch holds a good group. ok is good > len(good) × ratio
// (strictly, as SkyRL's `len(good_uids) > len(uid2metric_vals) *
// min_replace_ratio`); when false the batch must be discarded and sampled
// again. When ok, donor[i] is i for a good slot and, for a bad one, the
// good slot whose group takes its place: distinct donors (the first of a
// permutation of the good slots drawn from rng) when there are at least as
// many good slots as bad, else drawn with replacement — the two cases of
// get_bad_sample_replacements. rng is only drawn from when a bad slot is
// filled.
func ReplaceSlots(good []bool, ratio float64, rng *rand.Rand) (ok bool, donor []int) {
	var goods, bads []int
	for i, g := range good {
		if g {
			goods = append(goods, i)
		} else {
			bads = append(bads, i)
		}
	}
	if !EnoughGood(len(goods), len(good), ratio) {
		return false, nil
	}
	donor = make([]int, len(good))
	for i := range donor {
		donor[i] = i
	}
	if len(bads) == 0 {
		return true, donor
	}
	if len(goods) >= len(bads) {
		perm := rng.Perm(len(goods))
		for b, slot := range bads {
			donor[slot] = goods[perm[b]]
		}
	} else {
		for _, slot := range bads {
			donor[slot] = goods[rng.IntN(len(goods))]
		}
	}
	return true, donor
}
