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
// maxTokens tokens, SkyRL's balanced algorithm (skyrl/train/dataset/
// bin_packing.py, Balanced): sort by length only, descending and stable
// (equal lengths keep ascending index order); put each sequence into the
// least-loaded bin if it fits there (ties: the earliest bin), else open a
// new bin; a sequence longer than maxTokens gets a bin of its own, which
// then takes nothing else. maxTokens == Off gives one bin with everything,
// in input order. Bins are in opening order and each lists its indices in
// insertion order, exactly as SkyRL returns them.
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
	return bins, nil
}

// FirstFitDecreasing packs for SFT, SkyRL's FirstFitDecreasing
// (skyrl/train/dataset/bin_packing.py): sort the (length, index) pairs
// descending — so equal lengths go by DESCENDING index — and put each
// sequence into the first bin where it fits, else open one; each bin lists
// its indices in insertion order. A sequence over maxTokens is an error
// (ErrOversize). The bin count is then raised to at least minBinCount and
// to a multiple of binCountMultiple (the DP size, so every rank gets the
// same number of microbatches) as SkyRL's _adjust_bin_count does (see
// adjustBinCount); more bins than sequences is ErrTooFewSequences.
// maxTokens == Off starts from one bin.
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
	order := make([]int, len(tokens))
	for i := range order {
		order[i] = i
	}
	// (length, index) descending: Python's sort(reverse=True) on tuples.
	slices.SortFunc(order, func(a, b int) int {
		if tokens[a] != tokens[b] {
			return tokens[b] - tokens[a]
		}
		return b - a
	})
	var bins [][]int
	var loads []int
	for _, i := range order {
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
	return adjustBinCount(bins, len(tokens), minBinCount, binCountMultiple)
}

// adjustBinCount raises the bin count to at least minBinCount and to a
// multiple of binCountMultiple exactly as SkyRL's SeqPacker._adjust_bin_count:
// the existing bins are ranked by (size, index) descending; each new bin
// takes ONE sequence popped from the end of the first bin in that ranking
// that still holds more than one, moving down the ranking when a bin is
// down to a single sequence. Moving a sequence out of a bin never breaks
// the cap. Every bin must keep a sequence, so more bins than sequences is
// ErrTooFewSequences.
func adjustBinCount(bins [][]int, n, minBinCount, binCountMultiple int) ([][]int, error) {
	cur := len(bins)
	target := max(cur, minBinCount)
	if r := target % binCountMultiple; r != 0 {
		target += binCountMultiple - r
	}
	if target == cur {
		return bins, nil
	}
	if target > n {
		return nil, fmt.Errorf("%w: need %d bins (min_bin_count %d, multiple %d) for %d sequences",
			ErrTooFewSequences, target, minBinCount, binCountMultiple, n)
	}
	rank := make([]int, cur)
	for i := range rank {
		rank[i] = i
	}
	slices.SortFunc(rank, func(a, b int) int {
		if len(bins[a]) != len(bins[b]) {
			return len(bins[b]) - len(bins[a])
		}
		return b - a
	})
	src := 0
	for len(bins) < target {
		for len(bins[rank[src]]) <= 1 {
			src++ // cannot run out: fewer bins than sequences means one holds two
		}
		from := bins[rank[src]]
		last := from[len(from)-1]
		bins[rank[src]] = from[:len(from)-1]
		bins = append(bins, []int{last})
	}
	return bins, nil
}
