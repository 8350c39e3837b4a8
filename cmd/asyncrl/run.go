package main

import (
	"github.com/spf13/cobra"

	"github.com/asyncrl/asyncrl/config"
)

// runFlags are asyncrl run's flags; each overrides its config key when given.
type runFlags struct {
	config string // --config FILE
	steps  int    // --steps → run.steps
	seed   int64  // --seed → run.seed
	report string // --report DIR → run.report_dir
}

// newRunCmd: asyncrl run. It already loads and validates the configuration
// (so config errors surface now), then reports that the run itself is not
// built yet (issue 5).
func newRunCmd(g *globals) *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run a whole async RL job on this machine (embedded bus, engines, router, actors, trainer) (not built yet)",
		Args:  cobra.NoArgs,
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
				Str("report_dir", cfg.Run.ReportDir).Msg("config loaded")
			return notBuilt("run", 5)
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
