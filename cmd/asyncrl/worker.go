package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/asyncrl/asyncrl/cluster/node"
)

// newWorkerCmd: asyncrl worker — external workers of a run. `worker
// trainer` is the remote trainer backend (trainer.backend: remote).
func newWorkerCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run an external worker of a run (trainer)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	cmd.AddCommand(newWorkerTrainerCmd(g))
	return cmd
}

// newWorkerTrainerCmd: asyncrl worker trainer --nats URL [--config FILE].
func newWorkerTrainerCmd(g *globals) *cobra.Command {
	var natsURL, cfgPath string
	cmd := &cobra.Command{
		Use:   "trainer",
		Short: "Train a run's mini-batches from the bus (trainer.backend: remote); see docs/protocol.md",
		Long: "Connect to a run's NATS bus, train every TrainBatch with the built-in policy, write each\n" +
			"version to publisher.sync_dir, wait for the run's engines to load it and announce StepDone.\n" +
			"Use the same --config as `asyncrl run` (run id, seed, trainer section). One worker per run.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if natsURL == "" {
				return fail("asyncrl worker trainer: --nats URL is required (asyncrl run prints it)")
			}
			cfg, err := loadConfig(cfgPath, nil)
			if err != nil {
				return fail("asyncrl worker trainer: %v", err)
			}
			log, err := g.logger(cmd, cfg.Log)
			if err != nil {
				return fail("asyncrl worker trainer: %v", err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := node.RunWorker(ctx, cfg, node.WorkerOptions{NATSURL: natsURL, Logger: log}); err != nil {
				return fail("asyncrl worker trainer: %v", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&natsURL, "nats", "", "NATS `URL` of the run's bus")
	cmd.Flags().StringVar(&cfgPath, "config", "", "run configuration `FILE` (the run's)")
	return cmd
}
