package microbatch

import (
	"errors"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

func checkExactlyOnce(t *rapid.T, n int, bins [][]int) {
	seen := make([]int, n)
	for _, b := range bins {
		for _, i := range b {
			if i < 0 || i >= n {
				t.Fatalf("index %d out of range %d", i, n)
			}
			seen[i]++
		}
	}
	for i, c := range seen {
		if c != 1 {
			t.Fatalf("sequence %d appears %d times in %v", i, c, bins)
		}
	}
}

func genTokens(t *rapid.T) []int {
	return rapid.SliceOfN(rapid.IntRange(0, 300), 0, 80).Draw(t, "tokens")
}

// balancedRef is the naive reference: the same algorithm written the
// obvious way, bins as explicit lists and loads recomputed each time.
func balancedRef(tokens []int, cap int) [][]int {
	order := make([]int, len(tokens))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return tokens[b] - tokens[a] })
	var bins [][]int
	load := func(b []int) int {
		s := 0
		for _, i := range b {
			s += tokens[i]
		}
		return s
	}
	for _, i := range order {
		best := -1
		for b := range bins {
			if load(bins[b])+tokens[i] <= cap && (best < 0 || load(bins[b]) < load(bins[best])) {
				best = b
			}
		}
		if best < 0 {
			bins = append(bins, []int{i})
			continue
		}
		bins[best] = append(bins[best], i)
	}
	return bins
}

func TestPropertyBalanced(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tokens := genTokens(t)
		cap := rapid.IntRange(1, 400).Draw(t, "cap")
		bins, err := Balanced(tokens, cap)
		if err != nil {
			t.Fatal(err)
		}
		checkExactlyOnce(t, len(tokens), bins)
		for _, b := range bins {
			sum := 0
			for _, i := range b {
				sum += tokens[i]
			}
			if sum > cap && len(b) != 1 {
				t.Fatalf("bin %v holds %d > cap %d with %d sequences", b, sum, cap, len(b))
			}
		}
		if ref := balancedRef(tokens, cap); !slices.EqualFunc(bins, ref, slices.Equal) {
			t.Fatalf("bins %v, reference %v", bins, ref)
		}
	})
}

func TestPropertyFirstFitDecreasing(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cap := rapid.IntRange(300, 600).Draw(t, "cap")
		tokens := genTokens(t)
		minBins := rapid.IntRange(0, 10).Draw(t, "min")
		mul := rapid.IntRange(1, 4).Draw(t, "mul")
		base, err := FirstFitDecreasing(tokens, cap, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		need := max(len(base), minBins)
		need = (need + mul - 1) / mul * mul
		bins, err := FirstFitDecreasing(tokens, cap, minBins, mul)
		if (err != nil) != (need > len(tokens)) {
			t.Fatalf("need %d bins for %d sequences, err %v", need, len(tokens), err)
		}
		if err != nil {
			if !errors.Is(err, ErrTooFewSequences) {
				t.Fatalf("err %v", err)
			}
			return
		}
		if len(bins) != need {
			t.Fatalf("%d bins, want %d", len(bins), need)
		}
		checkExactlyOnce(t, len(tokens), bins)
		if len(bins) < minBins || len(bins)%mul != 0 {
			t.Fatalf("%d bins, min %d multiple %d", len(bins), minBins, mul)
		}
		for _, b := range bins {
			sum := 0
			for _, i := range b {
				sum += tokens[i]
			}
			if sum > cap || len(b) == 0 {
				t.Fatalf("bin %v: %d tokens, cap %d", b, sum, cap)
			}
		}
	})
}

func TestPropertyPartitionNotWorseThanGreedy(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		k := rapid.IntRange(1, 8).Draw(t, "k")
		tokens := rapid.SliceOfN(rapid.IntRange(1, 2000), 0, 64).Draw(t, "tokens")
		cost := rapid.SampledFrom([]Cost{Tokens(), FLOPs(1, 0.01)}).Draw(t, "cost")
		parts, err := Partition(tokens, k, StrategyKarmarkarKarp, cost, false)
		if err != nil {
			t.Fatal(err)
		}
		checkExactlyOnce(t, len(tokens), parts)
		costs := cost.Costs(tokens)
		kk, lpt := Imbalance(Loads(costs, parts)), Imbalance(Loads(costs, Greedy(costs, k)))
		if kk > lpt*(1+1e-12) {
			t.Fatalf("KK imbalance %v worse than LPT %v", kk, lpt)
		}
	})
}

func TestPropertyBuild(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tokens := genTokens(t)
		cfg := DefaultConfig()
		cfg.DPSize = rapid.IntRange(1, 8).Draw(t, "dp")
		cfg.MaxTokensPerMicrobatch = rapid.SampledFrom([]int{Off, 100, 500}).Draw(t, "cap")
		cfg.Strategy = rapid.SampledFrom([]Strategy{StrategyContiguous, StrategyKarmarkarKarp}).Draw(t, "strategy")
		if cfg.Strategy == StrategyKarmarkarKarp && len(tokens)%cfg.DPSize == 0 {
			cfg.EqualSize = rapid.Bool().Draw(t, "equal")
		}
		p, err := Build(tokens, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Ranks) != cfg.DPSize {
			t.Fatalf("%d ranks", len(p.Ranks))
		}
		var all [][]int
		count := len(p.Ranks[0].Microbatches)
		for _, r := range p.Ranks {
			if len(r.Microbatches) != count {
				t.Fatalf("unequal microbatch counts: %d vs %d", len(r.Microbatches), count)
			}
			if cfg.EqualSize && len(r.Indices) != len(tokens)/cfg.DPSize {
				t.Fatalf("equal size violated: %d", len(r.Indices))
			}
			var mine []int
			for _, mb := range r.Microbatches {
				if mb.Padding {
					if len(mb.Indices) != 0 || mb.Tokens != 1 {
						t.Fatalf("bad padding %+v", mb)
					}
					continue
				}
				all = append(all, mb.Indices)
				mine = append(mine, mb.Indices...)
			}
			slices.Sort(mine)
			if !slices.Equal(mine, r.Indices) {
				t.Fatalf("rank microbatches %v != rank indices %v", mine, r.Indices)
			}
		}
		checkExactlyOnce(t, len(tokens), all)
	})
}
