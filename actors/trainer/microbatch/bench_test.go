package microbatch

import (
	"math/rand/v2"
	"testing"
)

func benchTokens() []int {
	rng := rand.New(rand.NewPCG(42, 0))
	tokens := make([]int, 1024)
	for i := range tokens {
		// Long-tailed lengths, as RL rollouts are.
		tokens[i] = 64 + int(rng.ExpFloat64()*2000)
	}
	return tokens
}

// BenchmarkKarmarkarKarp1024x8 is KK alone: 1,024 sequences across 8 ranks.
// It reports the max/mean imbalance of KK and of LPT greedy on the input.
func BenchmarkKarmarkarKarp1024x8(b *testing.B) {
	costs := Tokens().Costs(benchTokens())
	var parts [][]int
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if parts, err = KarmarkarKarp(costs, 8, false); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(Imbalance(Loads(costs, parts))-1, "kk-excess")
	b.ReportMetric(Imbalance(Loads(costs, Greedy(costs, 8)))-1, "lpt-excess")
}

// BenchmarkGreedy1024x8 is the LPT reference on the same input.
func BenchmarkGreedy1024x8(b *testing.B) {
	costs := Tokens().Costs(benchTokens())
	b.ReportAllocs()
	for b.Loop() {
		Greedy(costs, 8)
	}
}

// BenchmarkBuild1024x8 is the full plan: KK (+ LPT check), balanced packing
// at 16k tokens per microbatch, padding. Reports both imbalances.
func BenchmarkBuild1024x8(b *testing.B) {
	tokens := benchTokens()
	cfg := DefaultConfig()
	cfg.DPSize, cfg.MaxTokensPerMicrobatch = 8, 16384
	var p Plan
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if p, err = Build(tokens, cfg); err != nil {
			b.Fatal(err)
		}
	}
	costs := Tokens().Costs(tokens)
	b.ReportMetric(p.Imbalance, "imbalance")
	b.ReportMetric(Imbalance(Loads(costs, Contiguous(len(tokens), 8))), "contiguous-imbalance")
}
