package sim

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/asyncrl/asyncrl/actors/staleness"
)

// TestCoverageDriver runs the seeds of a coverage measurement (package
// sim/simcov builds this test with -coverpkg over the cores and reads
// the profile). Skipped unless ASYNCRL_SIM_COVER_SEEDS is set: seeds per
// scenario, from seed 1; ASYNCRL_SIM_COVER_STEPS the steps per run
// (default 10); ASYNCRL_SIM_COVER_SCENARIOS a comma-separated list
// (default all); ASYNCRL_SIM_COVER_WORKERS the runs at once (default 2).
// Seed i runs under the scheduled staleness measure when odd, token when
// even, so both measures' branches count. A violation fails the test
// (and names the seed); the profile is still written.
func TestCoverageDriver(t *testing.T) {
	seeds := envInt(t, "ASYNCRL_SIM_COVER_SEEDS", 0)
	if seeds <= 0 {
		t.Skip("coverage driver: set ASYNCRL_SIM_COVER_SEEDS (make sim-coverage runs it through sim/simcov)")
	}
	steps := envInt(t, "ASYNCRL_SIM_COVER_STEPS", 10)
	workers := envInt(t, "ASYNCRL_SIM_COVER_WORKERS", 2)
	scs := Scenarios
	if s := os.Getenv("ASYNCRL_SIM_COVER_SCENARIOS"); s != "" {
		scs = nil
		for _, name := range strings.Split(s, ",") {
			sc, err := ParseScenario(strings.TrimSpace(name))
			if err != nil {
				t.Fatal(err)
			}
			scs = append(scs, sc)
		}
	}
	type job struct {
		sc   Scenario
		seed int64
	}
	jobs := make(chan job)
	var mu sync.Mutex
	var fails []string
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				m := []staleness.Measure{staleness.MeasureToken, staleness.MeasureScheduled}[j.seed%2]
				cfg := Config{Seed: j.seed, Scenario: j.sc, Steps: steps, Measure: m}
				if _, err := Run(cfg); err != nil {
					mu.Lock()
					fails = append(fails, fmt.Sprintf("seed %d scenario %s measure %s: %v", j.seed, j.sc, m, firstLines(err.Error(), 3)))
					mu.Unlock()
				}
			}
		}()
	}
	for _, sc := range scs {
		for s := int64(1); s <= int64(seeds); s++ {
			jobs <- job{sc, s}
		}
	}
	close(jobs)
	wg.Wait()
	for _, f := range fails {
		t.Error(f)
	}
	t.Logf("%d seeds × %v at %d steps: %d violations", seeds, scs, steps, len(fails))
}

func envInt(t *testing.T, key string, def int) int {
	t.Helper()
	s := os.Getenv(key)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s=%q: %v", key, s, err)
	}
	return n
}
