package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/asyncrl/asyncrl/actors/staleness"
	"github.com/asyncrl/asyncrl/sim"
)

// newSimCmd: asyncrl sim — the deterministic simulator (docs/sim.md).
func newSimCmd(g *globals) *cobra.Command {
	var (
		seed                  int64
		steps, seeds, engines int
		trace                 int
		scenario, measure     string
		minimize, printLog    bool
		asJSON                bool
		bugs                  []string
	)
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run a deterministic simulation of a whole run",
		Long: "Simulate the whole control plane — router, staleness controller, filter, microbatcher,\n" +
			"version tracker, rollout scheduler, the trainer's step rule and engines as latency models —\n" +
			"in one goroutine on a virtual clock over the in-memory bus. The seed draws the workload\n" +
			"and a fault schedule (scenario faults: crashes, hangs, slowdowns, message drop/duplicate/\n" +
			"delay/reorder, trainer, publisher and controller crashes, corrupted deltas, stale\n" +
			"metrics, the loss of the server holding the trajectory buffer; scenario partitions:\n" +
			"network partitions; mixed: both; failover: trainer nodes deciding with the real\n" +
			"cluster/term core — the lease holder killed or turned zombie, a standby taking over,\n" +
			"rollout nodes dying with groups in flight). Every invariant is checked after every\n" +
			"event; on a violation the seed, the invariant and a minimised event trace are printed\n" +
			"and the exit code is 1. The same seed always gives the same run.",
		Example: "  asyncrl sim --seed 42 --steps 10 --scenario faults\n" +
			"  asyncrl sim --seed 1 --seeds 5000 --scenario partitions\n" +
			"  asyncrl sim --seed 1 --seeds 5000 --scenario failover",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sc, err := sim.ParseScenario(scenario)
			if err != nil {
				return fail("asyncrl sim: --scenario: %v", err)
			}
			cfg := sim.Config{Seed: seed, Steps: steps, Scenario: sc, Engines: engines, TraceEvents: trace,
				Minimize: minimize, KeepLog: printLog && seeds == 1, Measure: staleness.Measure(measure)}
			for _, b := range bugs {
				bug, err := sim.ParseBug(b)
				if err != nil {
					return fail("asyncrl sim: --bug: %v", err)
				}
				cfg.Bugs = append(cfg.Bugs, bug)
			}
			if steps < 1 {
				return fail("asyncrl sim: --steps %d: want ≥ 1", steps)
			}
			if seeds < 1 {
				return fail("asyncrl sim: --seeds %d: want ≥ 1", seeds)
			}
			if printLog && seeds == 1 {
				res, err := sim.Run(cfg)
				for _, l := range res.Log {
					fmt.Fprintln(g.stdout, l)
				}
				return simOutcome(g.stdout, sim.Summary{}, res, err, asJSON)
			}
			sum, err := sim.RunSeeds(cfg, seeds)
			return simOutcome(g.stdout, sum, sim.Result{}, err, asJSON)
		},
	}
	f := cmd.Flags()
	f.Int64Var(&seed, "seed", 1, "seed of the (first) run; it draws the workload and the fault schedule")
	f.IntVar(&steps, "steps", 10, "trainer steps each run must complete")
	f.StringVar(&scenario, "scenario", string(sim.ScenarioDefault), "default (no faults), faults, partitions, mixed (both) or failover (the trainer lease's, over cluster/term)")
	f.IntVar(&seeds, "seeds", 1, "number of consecutive seeds to run, from --seed; stops at the first violation")
	f.IntVar(&engines, "engines", 0, "number of engines (0: drawn from the seed, 2–4)")
	f.IntVar(&trace, "trace", 40, "events of the trace printed with a violation")
	f.BoolVar(&minimize, "minimize", true, "on a violation, shrink the fault schedule (delta debugging) before reporting")
	f.BoolVar(&printLog, "log", false, "print the whole event log of a single seed")
	f.BoolVar(&asJSON, "json", false, "print the summary and any violation as one JSON object (durations in nanoseconds)")
	f.StringVar(&measure, "staleness-measure", "", "staleness measure the controller enforces and the oracle checks: scheduled (SkyRL, default) or token")
	f.StringSliceVar(&bugs, "bug", nil, "plant a bug (tests of the simulator itself)")
	_ = f.MarkHidden("bug")
	return cmd
}

// simOutcome prints the summary and turns a violation into exit code 1
// with the seed, the invariant and the trace.
func simOutcome(out io.Writer, sum sim.Summary, single sim.Result, err error, asJSON bool) error {
	if sum.Seeds == 0 && single.Events > 0 {
		sum.Add(single)
	}
	if asJSON {
		var v *sim.Violation
		errors.As(err, &v)
		b, jerr := json.MarshalIndent(struct {
			Summary   sim.Summary    `json:"summary"`
			Violation *sim.Violation `json:"violation"`
		}{sum, v}, "", "  ")
		if jerr != nil {
			return fail("asyncrl sim: %v", jerr)
		}
		fmt.Fprintln(out, string(b))
	} else if sum.Seeds > 0 {
		_, _ = sum.WriteTo(out)
	}
	if err != nil {
		// sim's errors start with "sim: ", so this reads "asyncrl sim: …".
		return fail("asyncrl %v", err)
	}
	return nil
}
