package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors/trainer"
	"github.com/asyncrl/asyncrl/actors/trainer/bridge"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/internal/wiring"
	"github.com/asyncrl/asyncrl/policy"
)

// execDir is where the exec backend keeps its files for the run:
// init/ (version 0's weights, HF layout) and the child's out_dir (its
// checkpoints and resume state).
func execDir(cfg config.Config) string {
	return filepath.Join(cfg.Run.DataDir, "trainer-exec", cfg.Run.ID)
}

// execOnSent is bridge.Options.OnSent for the exec backends this package
// starts: nil but in tests, which kill the child mid-step with it.
var execOnSent func(typ string, pid int)

// startExec starts the exec backend (trainer.backend exec, or `asyncrl
// worker trainer --exec`): version 0's weights — initial, the serving
// copy the engines start from — are written to execDir/init as the
// child's model.path, and argv (trainer.exec when empty) is started with
// trainer.exec_env, Init from the trainer section through
// wiring.PolicyTrainer, trainer.exec_step_timeout and exec_restarts. The
// trainer actor that gets the returned Stepper closes it on Stop.
func startExec(ctx context.Context, cfg config.Config, initial *policy.Model, argv []string, log zerolog.Logger) (*trainer.Exec, error) {
	return startExecChild(ctx, cfg, argv, log, "builtin", func(dir string) (string, error) {
		initDir := filepath.Join(dir, "init")
		if err := initial.SaveServing(initDir); err != nil {
			return "", fmt.Errorf("node: exec trainer initial weights: %w", err)
		}
		return initDir, nil
	})
}

// startExecChild starts argv (trainer.exec when empty) in a fresh
// execDir with Init model kind and model.path modelPath(execDir) returns,
// trainer.exec_env, exec_step_timeout and exec_restarts. Each version's
// directory of another architecture than the built-in policy is checked
// (wiring.CheckServing) before it is published, and the newest 3 serving
// directories stay: the publisher has read each version when Step
// returns, and one directory per step would pile up over a long run.
func startExecChild(ctx context.Context, cfg config.Config, argv []string, log zerolog.Logger, kind string, modelPath func(dir string) (string, error)) (*trainer.Exec, error) {
	if len(argv) == 0 {
		argv = cfg.Trainer.Exec
	}
	if len(argv) == 0 {
		return nil, fmt.Errorf("%w: trainer.exec: the exec backend needs the trainer child's command", ErrConfig)
	}
	dir := execDir(cfg)
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("node: exec trainer dir: %w", err)
	}
	model, err := modelPath(dir)
	if err != nil {
		return nil, err
	}
	in, err := bridge.InitFor(trainerConfig(cfg), true, kind, model, filepath.Join(dir, "out"))
	if err != nil {
		return nil, err
	}
	ex, err := trainer.NewExecWith(ctx, bridge.Options{
		Spec: bridge.Spec{Argv: argv, Env: cfg.Trainer.ExecEnv}, Init: in,
		StepTimeout: cfg.Trainer.ExecStepTimeout, Restarts: cfg.Trainer.ExecRestarts,
		Backoff: time.Second, Logger: log.With().Str("component", "trainer-child").Logger(),
		OnSent: execOnSent, Ranks: cfg.Trainer.ExecRanks, Rendezvous: cfg.Trainer.ExecRendezvousTimeout,
	}, trainer.ExecOptions{CheckDir: wiring.CheckServing, KeepServing: 3})
	if err != nil {
		return nil, fmt.Errorf("node: trainer.exec %v: %w", argv, err)
	}
	return ex, nil
}

// startExecTrainer is the node's trainer actor on the exec backend. The
// cluster agent's trainer terms (checkpoint after each step, resume from
// one) need the in-process trainer's state and are not supported yet.
func (n *Node) startExecTrainer(ctx context.Context, initial *policy.Model, pub trainer.Publisher, tcfg trainer.Config) (*trainer.Actor, error) {
	if n.opts.AfterStep != nil || n.opts.TrainerCheckpoint != "" {
		return nil, fmt.Errorf("%w: trainer.backend exec is not supported by asyncrl node's trainer terms yet (use asyncrl run)", ErrConfig)
	}
	var ex *trainer.Exec
	var err error
	if n.hf != "" {
		ex, err = startHFExec(ctx, n.cfg, n.hf, nil, tcfg.Logger)
	} else {
		ex, err = startExec(ctx, n.cfg, initial, nil, tcfg.Logger)
	}
	if err != nil {
		return nil, err
	}
	if n.reg != nil {
		restarts := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "asyncrl_trainer_exec_restarts_total",
			Help: "Trainer children (trainer.backend exec) replaced after dying, hanging or breaking the protocol."},
			func() float64 { return float64(ex.Restarts()) })
		err := n.reg.Register(restarts)
		if err == nil {
			err = n.reg.Register(rankCollector{ex})
		}
		if err != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			return nil, errors.Join(fmt.Errorf("node: metrics: %w", err), ex.Close(cctx))
		}
	}
	n.exec = ex
	a, err := trainer.StartStepper(n.bus, ex, pub, tcfg)
	if err != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = ex.Close(cctx)
		return nil, err
	}
	return a, nil
}
