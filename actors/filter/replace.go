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

// Replace is POLARIS dynamic sampling. A group is good if its score std
// > 0 or n == 1. If good > total × ratio, every bad group is overwritten,
// position by position, with the trajectories of a randomly chosen good
// group: distinct good groups (a permutation drawn from rng) when there are
// at least as many good groups as bad, else chosen with replacement. The
// k-th trajectory of the bad group takes the (k mod size)-th trajectory of
// its donor. Good trajectories keep their slots.
func Replace(samples []Sample, n int, ratio float64, rng *rand.Rand) ReplaceResult {
	gs := groupsOf(samples)
	var goods, bads []group
	for _, g := range gs {
		if good(samples, g.indices, n) {
			goods = append(goods, g)
		} else {
			bads = append(bads, g)
		}
	}
	res := ReplaceResult{Source: make([]int, len(samples)), GoodGroups: len(goods), TotalGroups: len(gs)}
	for i := range res.Source {
		res.Source[i] = i
	}
	if !(float64(len(goods)) > float64(len(gs))*ratio) {
		return res
	}
	res.Replaced = true
	if len(bads) == 0 {
		return res
	}
	donors := make([]int, len(bads))
	if len(goods) >= len(bads) {
		copy(donors, rng.Perm(len(goods))[:len(bads)])
	} else {
		for i := range donors {
			donors[i] = rng.IntN(len(goods))
		}
	}
	for b, bad := range bads {
		src := goods[donors[b]].indices
		for k, slot := range bad.indices {
			res.Source[slot] = src[k%len(src)]
		}
	}
	return res
}
