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

	// A planted bug is found within a few seeds.
	for seed := int64(1); seed <= 100; seed++ {
		_, err = sim.Run(sim.Config{Seed: seed, Steps: 5, Bugs: []sim.Bug{sim.BugRouterIgnoresGating}})
		var v *sim.Violation
		if errors.As(err, &v) {
			fmt.Println(v.Invariant)
			break
		}
	}
	// Output:
	// <nil> 5
	// routing-gate
}
