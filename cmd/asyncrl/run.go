package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/asyncrl/asyncrl/cluster/node"
	"github.com/asyncrl/asyncrl/config"
)

// runFlags are asyncrl run's flags; each overrides its config key when given.
type runFlags struct {
	config string // --config FILE
	steps  int    // --steps → run.steps
	seed   int64  // --seed → run.seed
	report string // --report DIR → run.report_dir
}

// newRunCmd: asyncrl run — one node with every role (embedded NATS,
// built-in engines behind the router, rollout, sampling, staleness
// controller, trainer) that trains until run.steps steps are done or the
// process is interrupted, then writes the report.
func newRunCmd(g *globals) *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run a whole async RL job on this machine (embedded bus, engines, router, actors, trainer)",
		Long: "Run a whole fully asynchronous RL job in this process: an embedded NATS server, the\n" +
			"built-in engines behind the router, rollout actors, the dynamic-sampling filter, the\n" +
			"staleness controller and the trainer. Ctrl-C stops cleanly and still writes the report\n" +
			"(summary.json, report.html and PNG plots in run.report_dir). See docs/run.md.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadRunConfig(cmd, f)
			if err != nil {
				return fail("asyncrl run: %v", err)
			}
			log, err := g.logger(cmd, cfg.Log)
			if err != nil {
				return fail("asyncrl run: %v", err)
			}
			log.Debug().Str("run", cfg.Run.ID).Int("steps", cfg.Run.Steps).Int64("seed", cfg.Run.Seed).
				Str("report_dir", cfg.Run.ReportDir).Str("task", cfg.Rollout.Task).Msg("config loaded")
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			tty := false
			if fl, ok := g.stderr.(*os.File); ok {
				tty = term.IsTerminal(int(fl.Fd()))
			}
			engines := fmt.Sprintf("%d engines", cfg.Engines.Count)
			if k := len(cfg.Engines.External); k > 0 {
				engines += fmt.Sprintf(" + %d external", k)
			}
			fmt.Fprintf(g.stderr, "asyncrl run %s: task %s, %d steps, seed %d, B=%d W=%d S=%d, %s, pause %s, trainer %s\n",
				cfg.Run.ID, cfg.Rollout.Task, cfg.Run.Steps, cfg.Run.Seed, cfg.Trainer.MiniBatchSize,
				cfg.Trainer.NumParallelGenerationWorkers, cfg.Trainer.MaxStalenessSteps, engines, cfg.Trainer.PauseMode, cfg.Trainer.Backend)
			opts := node.Options{Logger: log, Progress: g.stderr, Terminal: tty}
			if !cfg.Model.HF() {
				// e.g. an SFT run's latest/trainer; a Hugging Face model's
				// init_checkpoint is its serving directory (node.resolveModel)
				opts.TrainerCheckpoint = cfg.Trainer.InitCheckpoint
			}
			if cfg.Trainer.Backend == config.BackendRemote {
				opts.OnStart = func(n *node.Node) {
					fmt.Fprintf(g.stderr, "waiting for the trainer: asyncrl worker trainer --nats %s", n.BusURL())
					if f.config != "" {
						fmt.Fprintf(g.stderr, " --config %s", f.config)
					}
					fmt.Fprintln(g.stderr)
				}
			}
			s, err := node.Run(ctx, cfg, opts)
			if s.Steps > 0 || s.Interrupted {
				first, last := s.RewardFirst5, s.RewardLast5
				fmt.Fprintf(g.stdout, "steps %d, final version %d, reward first5 %.3f → last5 %.3f, staleness max %d (bound %d), trajectories lost %d, %.0f tok/s, %.1fs\n",
					s.Steps, s.FinalVersion, first, last, s.StalenessMax, s.StalenessBound, s.TrajectoriesLost, s.TokensPerSecond, s.WallSeconds)
				if s.GroupsDroppedZeroVariance > 0 && s.RewardGeneratedVersions > 0 {
					// the trained batches leave the dropped groups out: say
					// what the policy generated too
					fmt.Fprintf(g.stdout, "reward of every judged group (kept and dropped): first 5 versions %.3f → last 5 %.3f\n",
						s.RewardGeneratedFirst5, s.RewardGeneratedLast5)
				}
				if cfg.Run.ReportDir != "" {
					fmt.Fprintf(g.stdout, "report: %s/summary.json, %s/report.html\n", cfg.Run.ReportDir, cfg.Run.ReportDir)
				}
			}
			if err != nil {
				return fail("asyncrl run: %v", err)
			}
			if s.Interrupted {
				fmt.Fprintln(g.stderr, "asyncrl run: interrupted; report written")
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.config, "config", "", "run configuration `FILE` (YAML; default: the built-in defaults)")
	fs.IntVar(&f.steps, "steps", 0, "trainer steps to run (overrides run.steps)")
	fs.Int64Var(&f.seed, "seed", 0, "seed of the run (overrides run.seed)")
	fs.StringVar(&f.report, "report", "", "report `DIR` (overrides run.report_dir)")
	return cmd
}

// loadRunConfig loads --config (or the defaults) with the flags that were
// given applied on top, then validates.
func loadRunConfig(cmd *cobra.Command, f runFlags) (config.Config, error) {
	changed := cmd.Flags().Changed
	return loadConfig(f.config, func(c *config.Config) {
		if changed("steps") {
			c.Run.Steps = f.steps
		}
		if changed("seed") {
			c.Run.Seed = f.seed
		}
		if changed("report") {
			c.Run.ReportDir = f.report
		}
	})
}
