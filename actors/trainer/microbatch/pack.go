package microbatch

import (
	"errors"
	"fmt"
	"slices"
)

// Off disables token-capped packing: everything goes in one microbatch.
const Off = -1

var (
	// ErrInvalid is wrapped by errors about bad arguments (negative token
	// counts, a zero cap, a bad rank count or strategy).
	ErrInvalid = errors.New("microbatch: invalid argument")
	// ErrOversize: first-fit-decreasing cannot place a sequence longer
	// than the cap (SFT packing has no "bin of its own" escape hatch).
	ErrOversize = errors.New("microbatch: sequence longer than max_tokens_per_microbatch")
	// ErrTooFewSequences: the required bin count exceeds the number of
	// sequences, so some bin would be empty.
	ErrTooFewSequences = errors.New("microbatch: fewer sequences than required bins")
)

func checkTokens(tokens []int) error {
	for i, t := range tokens {
		if t < 0 {
			return fmt.Errorf("%w: sequence %d has %d tokens", ErrInvalid, i, t)
		}
	}
	return nil
}

func checkCap(maxTokens int) error {
	if maxTokens != Off && maxTokens < 1 {
		return fmt.Errorf("%w: max_tokens_per_microbatch must be −1 (off) or ≥ 1, got %d", ErrInvalid, maxTokens)
	}
	return nil
}

// byTokensDesc returns the indices sorted by token count, descending,
// stable (equal counts keep their input order).
func byTokensDesc(tokens []int) []int {
	order := make([]int, len(tokens))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return tokens[b] - tokens[a] })
	return order
}

// Balanced packs sequences (by token count) into microbatches of at most
// maxTokens tokens, SkyRL's balanced algorithm: sort descending (stable);
// put each sequence into the least-loaded bin where it fits (ties: the
// earliest bin), else open a new bin; a sequence longer than maxTokens gets
// a bin of its own, which then takes nothing else. maxTokens == Off gives
// one bin with everything. Bins are in opening order; indices within a bin
// ascending, so each microbatch keeps the input order.
func Balanced(tokens []int, maxTokens int) ([][]int, error) {
	if err := checkTokens(tokens); err != nil {
		return nil, err
	}
	if err := checkCap(maxTokens); err != nil {
		return nil, err
	}
	if len(tokens) == 0 {
		return nil, nil
	}
	if maxTokens == Off {
		all := make([]int, len(tokens))
		for i := range all {
			all[i] = i
		}
		return [][]int{all}, nil
	}
	var bins [][]int
	var loads []int
	for _, i := range byTokensDesc(tokens) {
		best := -1
		for b, l := range loads {
			if l+tokens[i] <= maxTokens && (best < 0 || l < loads[best]) {
				best = b
			}
		}
		if best < 0 {
			bins = append(bins, nil)
			loads = append(loads, 0)
			best = len(bins) - 1
		}
		bins[best] = append(bins[best], i)
		loads[best] += tokens[i]
	}
	for _, b := range bins {
		slices.Sort(b)
	}
	return bins, nil
}

// FirstFitDecreasing packs for SFT: sort descending (stable), put each
// sequence into the first bin where it fits, else open one. A sequence
// over maxTokens is an error (ErrOversize). The bin count is then raised
// to at least minBinCount and to a multiple of binCountMultiple (the DP
// size, so every rank gets the same number of microbatches) by splitting
// the fullest bin holding ≥ 2 sequences into two balanced halves —
// splitting never breaks the cap. More bins than sequences is
// ErrTooFewSequences. maxTokens == Off starts from one bin.
func FirstFitDecreasing(tokens []int, maxTokens, minBinCount, binCountMultiple int) ([][]int, error) {
	if err := checkTokens(tokens); err != nil {
		return nil, err
	}
	if err := checkCap(maxTokens); err != nil {
		return nil, err
	}
	if minBinCount < 0 || binCountMultiple < 1 {
		return nil, fmt.Errorf("%w: min_bin_count must be ≥ 0 and bin_count_multiple ≥ 1, got %d and %d", ErrInvalid, minBinCount, binCountMultiple)
	}
	var bins [][]int
	var loads []int
	for _, i := range byTokensDesc(tokens) {
		if maxTokens != Off && tokens[i] > maxTokens {
			return nil, fmt.Errorf("%w: sequence %d has %d tokens, cap %d", ErrOversize, i, tokens[i], maxTokens)
		}
		b := slices.IndexFunc(loads, func(l int) bool { return maxTokens == Off || l+tokens[i] <= maxTokens })
		if b < 0 {
			bins = append(bins, nil)
			loads = append(loads, 0)
			b = len(bins) - 1
		}
		bins[b] = append(bins[b], i)
		loads[b] += tokens[i]
	}
	target := max(len(bins), minBinCount)
	if r := target % binCountMultiple; r != 0 {
		target += binCountMultiple - r
	}
	if target > len(tokens) {
		return nil, fmt.Errorf("%w: need %d bins (min_bin_count %d, multiple %d) for %d sequences",
			ErrTooFewSequences, target, minBinCount, binCountMultiple, len(tokens))
	}
	for len(bins) < target {
		split := -1
		for b := range bins {
			if len(bins[b]) >= 2 && (split < 0 || loads[b] > loads[split]) {
				split = b
			}
		}
		// Items of a bin are in descending order already; deal them LPT
		// into two halves.
		var halves [2][]int
		var hl [2]int
		for _, i := range bins[split] {
			h := 0
			if hl[1] < hl[0] || (hl[1] == hl[0] && len(halves[1]) < len(halves[0])) {
				h = 1
			}
			halves[h] = append(halves[h], i)
			hl[h] += tokens[i]
		}
		bins[split], loads[split] = halves[0], hl[0]
		bins = append(bins, halves[1])
		loads = append(loads, hl[1])
	}
	for _, b := range bins {
		slices.Sort(b)
	}
	return bins, nil
}
