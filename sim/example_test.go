package sim_test

import (
	"errors"
	"fmt"

	"github.com/asyncrl/asyncrl/sim"
)

// A seed is a whole reproducible run; a planted bug shows what a
// violation reports.
func Example() {
	res, err := sim.Run(sim.Config{Seed: 42, Steps: 5, Scenario: sim.ScenarioFaults})
	fmt.Println(err, res.StepsTrained)

	_, err = sim.Run(sim.Config{Seed: 1, Steps: 5, Bugs: []sim.Bug{sim.BugRouterIgnoresGating}})
	var v *sim.Violation
	if errors.As(err, &v) {
		fmt.Println(v.Seed, v.Invariant)
	}
	// Output:
	// <nil> 5
	// 1 routing-gate
}
