package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/asyncrl/asyncrl/actors/trainer/bridge"
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
	cmd.AddCommand(newWorkerTrainerCmd(g), newWorkerChildCmd())
	return cmd
}

// newWorkerChildCmd: asyncrl worker child — the built-in policy trainer
// behind the worker-bridge frames on stdin/stdout: a trainer.exec child
// with no dependencies (trainer.exec: [asyncrl, worker, child]).
func newWorkerChildCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "child",
		Short: "Serve the worker-bridge frames on stdin/stdout with the built-in policy (a trainer.exec child); see docs/trainers.md",
		Long: "Speak the trainer worker bridge (frames v1, docs/protocol.md) on stdin/stdout and train the\n" +
			"built-in policy: the reference child of trainer.backend exec, started by asyncrl itself\n" +
			"(trainer.exec: [asyncrl, worker, child]). Not for interactive use.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := &bridge.BuiltinChild{}
			if err := c.Serve(os.Stdin, os.Stdout); err != nil {
				return fail("asyncrl worker child: %v", err)
			}
			return nil
		},
	}
}

// newWorkerTrainerCmd: asyncrl worker trainer --nats URL [--config FILE]
// [--exec [-- CMD ARGS…]].
func newWorkerTrainerCmd(g *globals) *cobra.Command {
	var natsURL, cfgPath string
	var useExec bool
	cmd := &cobra.Command{
		Use:   "trainer [--exec [-- CMD ARGS...]]",
		Short: "Train a run's mini-batches from the bus (trainer.backend: remote); see docs/protocol.md",
		Long: "Connect to a run's NATS bus, train every TrainBatch with the built-in policy, write each\n" +
			"version to publisher.sync_dir, wait for the run's engines to load it and announce StepDone.\n" +
			"Use the same --config as `asyncrl run` (run id, seed, trainer section). One worker per run.\n" +
			"With --exec the steps run in a child process over the worker bridge (docs/trainers.md):\n" +
			"the command after --, or trainer.exec.",
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if natsURL == "" {
				return fail("asyncrl worker trainer: --nats URL is required (asyncrl run prints it)")
			}
			if len(args) > 0 && !useExec {
				return fail("asyncrl worker trainer: a command (%q) is only taken with --exec", args[0])
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
			if err := node.RunWorker(ctx, cfg, node.WorkerOptions{NATSURL: natsURL, Logger: log, Exec: useExec, ExecArgv: args}); err != nil {
				return fail("asyncrl worker trainer: %v", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&natsURL, "nats", "", "NATS `URL` of the run's bus")
	cmd.Flags().StringVar(&cfgPath, "config", "", "run configuration `FILE` (the run's)")
	cmd.Flags().BoolVar(&useExec, "exec", false, "train in a child process over the worker bridge: the command after --, else trainer.exec")
	return cmd
}
