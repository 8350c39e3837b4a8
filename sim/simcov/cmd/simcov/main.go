// Command simcov measures the cores' coverage under the simulator
// (package sim/simcov): `go run ./sim/simcov/cmd/simcov -seeds 5000`
// prints the per-core table, every reachable block no seed reached and
// every block excluded as unreachable with its reason. `make
// sim-coverage` runs it.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/asyncrl/asyncrl/sim/simcov"
)

func main() {
	var o simcov.Options
	flag.IntVar(&o.Seeds, "seeds", 5000, "seeds per scenario (from seed 1)")
	flag.IntVar(&o.Steps, "steps", 10, "trainer steps per run")
	flag.StringVar(&o.Scenarios, "scenarios", "", "comma-separated scenarios (default: all)")
	flag.IntVar(&o.Workers, "workers", 2, "runs at once")
	flag.StringVar(&o.Profile, "profile", "", "keep the coverage profile at this path (go tool cover -html)")
	flag.DurationVar(&o.Timeout, "timeout", 3*time.Hour, "limit for the whole measurement")
	flag.StringVar(&o.FromProfile, "from-profile", "", "run nothing: report on this profile (of -profile) against the sources under -root")
	flag.StringVar(&o.Root, "root", "", "the module root whose sources the profile is read against (default: the one around the working directory)")
	details := flag.Bool("details", true, "list the blocks not reached and the ones excluded")
	flag.Parse()
	rep, err := simcov.Measure(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Print(rep.Summary())
	if *details {
		fmt.Print(rep.Details())
	}
	for _, f := range rep.Failures {
		fmt.Fprintln(os.Stderr, "violation:", f)
	}
	if len(rep.Failures) > 0 {
		os.Exit(1)
	}
}
