package microbatch_test

import (
	"fmt"

	"github.com/asyncrl/asyncrl/actors/trainer/microbatch"
)

func ExampleBalanced() {
	bins, _ := microbatch.Balanced([]int{10, 10, 5, 5}, 15)
	fmt.Println(bins)
	// Output: [[0 2] [1 3]]
}

// Two ranks, 10-token microbatches: rank 1 is padded to rank 0's count.
func ExampleBuild() {
	cfg := microbatch.DefaultConfig()
	cfg.DPSize, cfg.MaxTokensPerMicrobatch, cfg.Strategy = 2, 10, microbatch.StrategyContiguous
	p, _ := microbatch.Build([]int{10, 10, 5, 5}, cfg)
	for r, rk := range p.Ranks {
		for _, mb := range rk.Microbatches {
			fmt.Println(r, mb.Indices, mb.Tokens, mb.Padding)
		}
	}
	fmt.Printf("imbalance %.3f\n", p.Imbalance)
	// Output:
	// 0 [0] 10 false
	// 0 [1] 10 false
	// 1 [2 3] 10 false
	// 1 [] 1 true
	// imbalance 1.333
}
