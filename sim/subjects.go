package sim

import "github.com/asyncrl/asyncrl/transport"

// plan is the simulated run's subject plan: the same transport.Plan a
// node's run uses, so the simulator's subjects are the system's
// (TestSimSubjectsAreThePlan fails on a subject the plan does not name).
// Where the simulator stands in for an HTTP exchange (turns) it uses the
// plan's simulator-only subjects.
var plan = transport.MustPlan(runID)

// must is for subjects built from the constant run id and engine ids.
func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}
