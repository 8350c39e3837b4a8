package simcov

import (
	"os"
	"strconv"
	"testing"
)

// Floors are the per-core coverage floors TestCoreCoverage enforces: the
// reachable blocks hit by coverSeeds seeds of every scenario at 10 steps,
// as measured when they were set (issue 37), less a margin for the odd
// block a change of the event order moves past the seed budget. The
// 5,000-seed figures are higher (make sim-coverage; the report of issue
// 37 has both).
//
// term: the merged failover world (issue 37's durable-ledger writers and
// its generators together) reaches 95.3% of the term core's reachable
// blocks in 100 seeds and 98.3% in 1,000: its rarest inputs (a loss
// notice coalesced with a re-acquisition while running, a clean stop
// while claiming, a failure while stopping) need more than 100 seeds.
//
// lease: the contender core (issue 31) under the failover scenario's
// electors reaches 64 of its 65 reachable blocks in 100 seeds (the one
// left is a fenced claim, CheckFence's refusal).
//
// rankhost: the rank-host rule (cluster/rankhost/fence, issue 31) under
// the failover scenario's rank hosts reaches 20 of its 21 reachable
// blocks in 100 seeds; the one left is Register's refusal (a newer term's
// request arriving while a start's ranks come up: one seed in 1,000).
//
// steprule: the trainer's step rule (the production one, with publish
// retries) reaches all 38 of its reachable blocks in 100 seeds; the
// give-up's are reached by the fleet outages that outlast the retry
// schedule (3 of the 400 seeds), the retries' by about one seed in four.
//
// fetchrule: the trainer's fetch retry rule, stepped by the default
// world's trainer while a replicated trajectory buffer elects a leader,
// reaches 7 of its 9 reachable blocks in 100 seeds (1,000 seeds at 10
// steps: 432 tries retried in faults, 386 in mixed). The two left are the give-up (After's
// and its note): it needs the buffer to fail every try for 30 s, and a
// drawn election lasts 4–9 s — only elections overlapping back to back
// would get there, which no seed of 1,000 drew.
//
// outcome: the rollout's group outcome (actors/rollout/outcome) reached
// 17 of its 24 reachable blocks in 100 seeds when only the default world
// stepped it, and never its store stage; since the failover world's
// rollout nodes step it too and both worlds store through it, all 26
// (Stored's give-up and Unstored from the stores a term switch cuts short:
// about one failover seed in eight). The floor leaves one block of margin.
var Floors = map[string]float64{
	"term":          94.5,
	"lease":         95,
	"rankhost":      90,
	"controller":    97,
	"sampling":      97,
	"tracker":       97,
	"router-policy": 75,
	"steprule":      97,
	"fetchrule":     77,
	"outcome":       96,
}

// coverSeeds is the seeds per scenario of the test's measurement.
const coverSeeds = 100

// TestCoreCoverage measures the cores' coverage under the simulator
// (coverSeeds seeds of each scenario; ASYNCRL_SIM_COVER_TEST_SEEDS changes
// it) and fails when a core falls below its floor, when a seed breaks an
// invariant, or when a block listed as unreachable was reached (the list
// would be wrong). It needs the go command; -short skips it.
func TestCoreCoverage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs sim's coverage driver")
	}
	seeds := coverSeeds
	if s := os.Getenv("ASYNCRL_SIM_COVER_TEST_SEEDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		seeds = n
	}
	rep, err := Measure(Options{Seeds: seeds, Steps: 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Summary())
	for _, f := range rep.Failures {
		t.Errorf("violation: %s", f)
	}
	for _, c := range rep.Cores {
		for _, b := range c.Excluded() {
			if b.Hit {
				t.Errorf("%s: a block listed as unreachable was reached (fix sim/simcov/unreachable.go): %s", c.Core.Name, b)
			}
		}
	}
	if err := rep.CheckFloors(Floors); err != nil {
		for _, c := range rep.Cores {
			for _, b := range c.Missed() {
				t.Logf("%s: not reached: %s", c.Core.Name, b)
			}
		}
		t.Error(err)
	}
}
