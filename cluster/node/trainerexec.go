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

	"github.com/asyncrl/asyncrl/actors/publisher"
	"github.com/asyncrl/asyncrl/actors/trainer"
	"github.com/asyncrl/asyncrl/actors/trainer/bridge"
	"github.com/asyncrl/asyncrl/config"
	pmodel "github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/wiring"
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
func startExec(ctx context.Context, cfg config.Config, initial *pmodel.Model, argv []string, log zerolog.Logger) (*trainer.Exec, error) {
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
	return startExecAt(ctx, cfg, argv, log, kind, modelPath, execStart{})
}

// execStart is where a trainer child starts other than model.path — a
// state directory it (or a worker group) wrote, at that state's step —
// and, for a group over several nodes (trainer.exec_nodes), where the
// other nodes' ranks start and the address they reach rank 0 at.
type execStart struct {
	dir    string // "" = from model.path at step 0
	step   int64
	remote bridge.RemoteRanks
	addr   string
}

// startExecAt is startExecChild with the child's Init resuming from r.
func startExecAt(ctx context.Context, cfg config.Config, argv []string, log zerolog.Logger, kind string, modelPath func(dir string) (string, error), r execStart) (*trainer.Exec, error) {
	if len(argv) == 0 {
		argv = cfg.Trainer.Exec
	}
	if len(argv) == 0 {
		return nil, fmt.Errorf("%w: trainer.exec: the exec backend needs the trainer child's command", ErrConfig)
	}
	if cfg.Trainer.ExecNodes > 1 && r.remote == nil {
		return nil, fmt.Errorf("%w: trainer.exec_nodes %d spreads the trainer group over several asyncrl node processes: run it as a cluster (asyncrl node --roles trainer,… on %d nodes); a single process trains on its own ranks only (set exec_nodes to 1 and exec_ranks to the world size)",
			ErrConfig, cfg.Trainer.ExecNodes, cfg.Trainer.ExecNodes)
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
	if r.dir != "" {
		in.Resume, in.Step = &r.dir, r.step
	}
	ex, err := trainer.NewExecWith(ctx, bridge.Options{
		Spec: bridge.Spec{Argv: argv, Env: cfg.Trainer.ExecEnv}, Init: in,
		StepTimeout: cfg.Trainer.ExecStepTimeout, Restarts: cfg.Trainer.ExecRestarts,
		Backoff: time.Second, Logger: log.With().Str("component", "trainer-child").Logger(),
		OnSent: execOnSent, Ranks: cfg.Trainer.ExecRanks, Rendezvous: cfg.Trainer.ExecRendezvousTimeout,
		Nodes: cfg.Trainer.ExecNodes, Remote: r.remote, RendezvousAddr: r.addr,
	}, trainer.ExecOptions{CheckDir: wiring.CheckServing, KeepServing: 3})
	if err != nil {
		return nil, fmt.Errorf("node: trainer.exec %v: %w", argv, err)
	}
	return ex, nil
}

// startExecTrainer is the node's trainer actor on the exec backend. On a
// cluster agent's trainer term the child resumes from the term's durable
// state (Options.ExecCheckpoint at ExecCheckpointVersion) and every new
// version's state is handed to Options.AfterExecStep (the term uploads it
// to the checkpoint store) before its step is recorded.
func (n *Node) startExecTrainer(ctx context.Context, initial *pmodel.Model, pub publisher.Publisher, tcfg trainer.Config) (*trainer.Actor, error) {
	if n.opts.AfterStep != nil || n.opts.TrainerCheckpoint != "" {
		return nil, fmt.Errorf("%w: trainer.backend exec resumes from and checkpoints the child's state (Options.ExecCheckpoint, AfterExecStep), not a built-in trainer's", ErrConfig)
	}
	ex, err := n.startExecBackend(ctx, initial, tcfg)
	if err != nil {
		return nil, err
	}
	tcfg.VersionBase = ex.Version()
	if n.opts.AfterExecStep != nil {
		pub = execAfterStep{Publisher: pub, ex: ex, after: n.opts.AfterExecStep}
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

// startExecBackend starts the child: on the run's Hugging Face model, or
// the built-in policy's initial weights, resumed from
// Options.ExecCheckpoint when set.
func (n *Node) startExecBackend(ctx context.Context, initial *pmodel.Model, tcfg trainer.Config) (*trainer.Exec, error) {
	r := execStart{dir: n.opts.ExecCheckpoint, step: n.opts.ExecCheckpointVersion, remote: n.opts.ExecRemote, addr: n.opts.ExecRendezvousAddr}
	if n.hf != "" {
		// the child trains the checkpoint itself as model kind hf (each
		// version's directory checked by wiring.CheckServing and the older
		// ones pruned, startExecAt); on a resumed term its model.path is
		// the durable state, whose config.json and F32 weights the engines
		// start from too (hfWeights)
		w := n.hfWeights()
		return startExecAt(ctx, n.cfg, nil, tcfg.Logger, "hf", func(string) (string, error) { return w, nil }, r)
	}
	return startExecAt(ctx, n.cfg, nil, tcfg.Logger, "builtin", func(dir string) (string, error) {
		initDir := filepath.Join(dir, "init")
		if err := initial.SaveServing(initDir); err != nil {
			return "", fmt.Errorf("node: exec trainer initial weights: %w", err)
		}
		return initDir, nil
	}, r)
}

// execAfterStep runs Options.AfterExecStep with the child's resume state
// of each version once it is published, in the trainer actor's goroutine
// (the supervisor deletes a state only when the next step completes, so
// the directory is whole during the call). Its error is a
// trainer.AfterPublishError, retried as a failed publish under
// publisher.attempts.
type execAfterStep struct {
	publisher.Publisher
	ex    *trainer.Exec
	after func(ctx context.Context, state string, version int64) error
}

// Publish implements publisher.Publisher.
func (p execAfterStep) Publish(ctx context.Context, w publisher.Weights, v int64) error {
	if err := p.Publisher.Publish(ctx, w, v); err != nil {
		return err
	}
	if err := p.after(ctx, p.ex.State(), v); err != nil {
		return &trainer.AfterPublishError{Version: v, What: "checkpoint", Err: fmt.Errorf("node: after version %d: %w", v, err)}
	}
	return nil
}

// execCheckpointPolicy holds the weights of a trainer child's resume state
// (its config.json and F32 model.safetensors load as a serving
// checkpoint) as this run's version 0: what the engines start from and
// what the child's Init names as model.path; the child itself restores
// the state, moments and step included.
func execCheckpointPolicy(dir string, tcfg pmodel.TrainerConfig) (*pmodel.Trainer, error) {
	m, err := pmodel.LoadServing(dir)
	if err != nil {
		return nil, fmt.Errorf("node: trainer child state %s: %w", dir, err)
	}
	tr, err := pmodel.NewTrainer(m, tcfg)
	if err != nil {
		return nil, fmt.Errorf("%w: trainer: %w", ErrConfig, err)
	}
	return tr, nil
}
