package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/asyncrl/asyncrl/chaos"
	"github.com/asyncrl/asyncrl/internal/logx"
)

// newChaosCmd: asyncrl chaos — the real loop under a seeded schedule of
// injected faults, with its invariants checked at the end (docs/chaos.md).
func newChaosCmd(g *globals) *cobra.Command {
	var (
		duration, gap, hold time.Duration
		seed                int64
		faults, cfgPath     string
		engines, warmup     int
		asJSON              bool
	)
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Run the real loop under injected faults and check its invariants",
		Long: "Run the whole loop in this process — embedded NATS, the router, rollout, sampling,\n" +
			"staleness controller and a trainer worker — with its engines behind fault proxies,\n" +
			"and inject a seeded schedule of faults for --duration: engine kills with restarts on\n" +
			"the same port, latency, connection resets (mid-stream too) and blackholes (and, when\n" +
			"asked for, drops of the node's NATS connection). Then check\n" +
			"the invariants from the ledger and the router: nothing lost, every group ends once,\n" +
			"no prompt trained twice, staleness ≤ S, engine versions only increase, the router never\n" +
			"ahead of an engine, progress after the faults heal. Prints the faults injected and the\n" +
			"invariants held; exit code 1 on a violation. The same --seed gives the same schedule.\n" +
			"Logs below error level are off unless --log-level is given (warnings are expected).\n" +
			"See docs/chaos.md.",
		Example: "  asyncrl chaos --duration 60s --seed 3\n  asyncrl chaos --duration 20s --faults engine-kill,blackhole",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := chaos.DefaultConfig()
			rc, err := loadConfig(cfgPath, nil)
			if err != nil {
				return fail("asyncrl chaos: %v", err)
			}
			cfg.Run = rc
			cfg.Duration, cfg.Seed, cfg.Engines = duration, seed, engines
			cfg.MeanGap, cfg.MaxHold, cfg.WarmupSteps = gap, hold, warmup
			cfg.Faults = chaos.ParseFaults(faults)
			if err := cfg.Validate(); err != nil {
				return fail("asyncrl chaos: %v", err)
			}
			log, err := g.logger(cmd, rc.Log)
			if err != nil {
				return fail("asyncrl chaos: %v", err)
			}
			if !cmd.Flags().Changed("log-level") {
				// Under chaos the router's and rollouts' warnings (upstream
				// failed, replica unhealthy) are the expected echo of every
				// fault; only errors are news unless asked for.
				log = log.Level(zerolog.ErrorLevel)
			}
			cfg.Logger = logx.For(log, "chaos")
			cfg.Progress = g.stderr
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			fmt.Fprintf(g.stderr, "asyncrl chaos: seed %d, %v of faults (every %v on average, each up to %v) on %d engines\n",
				cfg.Seed, cfg.Duration, cfg.MeanGap, cfg.MaxHold, cfg.Engines)
			rep, err := chaos.Run(ctx, cfg)
			if len(rep.Invariants) > 0 {
				if asJSON {
					enc := json.NewEncoder(g.stdout)
					enc.SetIndent("", "  ")
					_ = enc.Encode(rep)
				} else {
					_ = rep.WriteTable(g.stdout)
				}
			}
			if errors.Is(err, chaos.ErrViolation) {
				return fail("asyncrl chaos: %v (reproduce: asyncrl chaos --seed %d --duration %v)", err, cfg.Seed, cfg.Duration)
			}
			if err != nil {
				return fail("asyncrl chaos: %v", err)
			}
			return nil
		},
	}
	d := chaos.DefaultConfig()
	fs := cmd.Flags()
	fs.DurationVar(&duration, "duration", d.Duration, "how long faults are injected")
	fs.Int64Var(&seed, "seed", d.Seed, "seed of the fault schedule and of the run")
	fs.StringVar(&faults, "faults", "all", "comma-separated fault `KINDS`: engine-kill, latency, reset, blackhole (all = these four), bus-reconnect (opt-in)")
	fs.IntVar(&engines, "engines", d.Engines, "engines behind fault proxies (≥ 2)")
	fs.DurationVar(&gap, "mean-gap", d.MeanGap, "mean time between fault starts")
	fs.DurationVar(&hold, "max-hold", d.MaxHold, "longest a fault lasts (holds are drawn in [max-hold/4, max-hold])")
	fs.IntVar(&warmup, "warmup-steps", d.WarmupSteps, "trainer steps to let pass before the first fault (--duration counts from then)")
	fs.BoolVar(&asJSON, "json", false, "print the report (faults as played, verdicts, run summary) as JSON instead of the table")
	fs.StringVar(&cfgPath, "config", "", "run configuration `FILE` (task, B, W, S, engines' latency model, …)")
	return cmd
}
