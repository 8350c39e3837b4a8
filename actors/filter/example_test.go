package filter_test

import (
	"fmt"
	"math/rand/v2"

	"github.com/asyncrl/asyncrl/actors/filter"
)

// DAPO dynamic sampling across two generation batches.
func ExampleAccumulator() {
	cfg := filter.DefaultConfig()
	cfg.TrainBatchSize, cfg.NSamplesPerPrompt = 2, 2
	acc, _ := filter.NewAccumulator(cfg)
	r, _ := acc.Add([]filter.Sample{filter.Scalar("u1", 1), filter.Scalar("u1", 2)})
	fmt.Println(r.Done, r.Prompts)
	r, _ = acc.Add([]filter.Sample{filter.Scalar("u2", 3), filter.Scalar("u2", 4)})
	fmt.Println(r.Done, r.Refs)
	// Output:
	// false 1
	// true [{0 0} {0 1} {1 0} {1 1}]
}

// POLARIS replacement: the flat group b takes the trajectories of group a.
func ExampleReplace() {
	batch := []filter.Sample{
		filter.Scalar("a", 0), filter.Scalar("a", 1),
		filter.Scalar("b", 1), filter.Scalar("b", 1),
	}
	r := filter.Replace(batch, 2, 0.3, rand.New(rand.NewPCG(1, 1)))
	fmt.Println(r.Replaced, r.Source)
	// Output: true [0 1 0 1]
}

// The async loop judges each finished group on its own.
func ExampleConfig_Decide() {
	cfg := filter.DefaultConfig()
	cfg.NSamplesPerPrompt = 2
	d, _ := cfg.Decide([]filter.Sample{filter.Scalar("p7", 1), filter.Scalar("p7", 1)})
	fmt.Println(d)
	// Output: drop uid=p7 reason=zero_variance
}
