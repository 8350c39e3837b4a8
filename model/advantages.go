package model

import "math"

// Advantages computes GRPO advantages the way SkyRL does: for each group
// (trajectories sharing a groupID) adv = (score − mean) / (std + 1e-6) with
// the unbiased (n−1) standard deviation, or score − mean when normStd is
// false. A singleton group uses mean 0 and std 1 (so its advantage is its
// score, divided by 1+1e-6 when normalising); a group whose scores are all
// equal gets advantage 0. Groups are found by exact string equality; the
// output is in input order.
func Advantages(scores []float64, groupIDs []string, normStd bool) []float64 {
	if len(scores) != len(groupIDs) {
		panic("model: Advantages: scores and groupIDs differ in length")
	}
	// Group membership in first-appearance order; no map iteration order
	// leaks into the result.
	index := make(map[string]int, len(scores))
	var members [][]int
	for i, g := range groupIDs {
		k, ok := index[g]
		if !ok {
			k = len(members)
			index[g] = k
			members = append(members, nil)
		}
		members[k] = append(members[k], i)
	}
	out := make([]float64, len(scores))
	for _, idx := range members {
		mean, std := 0.0, 1.0
		if len(idx) > 1 {
			var s float64
			for _, i := range idx {
				s += scores[i]
			}
			mean = s / float64(len(idx))
			var ss float64
			for _, i := range idx {
				d := scores[i] - mean
				ss += d * d
			}
			std = math.Sqrt(ss / float64(len(idx)-1))
		}
		for _, i := range idx {
			a := scores[i] - mean
			if normStd {
				a /= std + 1e-6
			}
			if len(idx) > 1 && std == 0 {
				a = 0
			}
			out[i] = a
		}
	}
	return out
}
