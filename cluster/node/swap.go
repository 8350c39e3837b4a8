package node

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/asyncrl/asyncrl/actors/controller"
	"github.com/asyncrl/asyncrl/actors/rollout"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/engine/driver"
	"github.com/asyncrl/asyncrl/wiring"
)

// The swapped parts (Options.Stepper, Source, Engines and the wrappers)
// and what a caller that swapped them reads back (bench/scale's
// measurements). Every reader is for after Start and until Stop; any
// goroutine may call it.

// checkSwapped refuses swapped parts the run cannot honour.
func checkSwapped(cfg config.Config, opts Options) error {
	if s := opts.Stepper; s != nil {
		switch {
		case s.Stepper == nil || s.Publisher == nil:
			return fmt.Errorf("%w: Options.Stepper needs both a Stepper and a Publisher", ErrConfig)
		case cfg.Trainer.Backend != config.BackendBuiltin:
			return fmt.Errorf("%w: Options.Stepper replaces the built-in trainer; trainer.backend is %s (set builtin)", ErrConfig, cfg.Trainer.Backend)
		case opts.Remote != nil:
			return fmt.Errorf("%w: Options.Stepper with Options.Remote: a term's engines take the built-in trainer's versions", ErrConfig)
		case opts.AfterStep != nil || opts.TrainerCheckpoint != "" || opts.ExecCheckpoint != "":
			return fmt.Errorf("%w: Options.Stepper has no built-in trainer to checkpoint (AfterStep, TrainerCheckpoint and ExecCheckpoint need one)", ErrConfig)
		}
	}
	if opts.StoreConcurrency < 0 {
		return fmt.Errorf("%w: Options.StoreConcurrency %d: want ≥ 0 (0: rollout's default store bound, 32)", ErrConfig, opts.StoreConcurrency)
	}
	if len(opts.Engines) > 0 && opts.Remote != nil {
		return fmt.Errorf("%w: Options.Engines with Options.Remote: a term serves from other nodes' engines", ErrConfig)
	}
	if len(opts.Engines) > 0 && opts.Stepper == nil {
		return fmt.Errorf("%w: Options.Engines need Options.Stepper: the built-in trainer's versions would be loaded into engines it did not build", ErrConfig)
	}
	return nil
}

// swappedInitialWeights is version 0 with Options.Stepper: the caller's
// engines serve their own model; engines the node starts serve the run
// seed's policy. No base checkpoint: no weight sync runs.
func (n *Node) swappedInitialWeights() (string, engine.Model, error) {
	if len(n.opts.Engines) > 0 {
		return "", nil, nil
	}
	initial, err := wiring.InitialPolicyFor("", wiring.PolicyModel(n.cfg), uint64(n.cfg.Run.Seed))
	if err != nil {
		return "", nil, fmt.Errorf("node: initial weights: %w", err)
	}
	return "", initial, nil
}

// RolloutStats are each rollout actor's counters (started, finished,
// aborted trajectories, tokens, ...).
func (n *Node) RolloutStats() []rollout.Stats {
	out := make([]rollout.Stats, len(n.rollouts))
	for i, r := range n.rollouts {
		out[i] = r.Stats()
	}
	return out
}

// ControllerCore is the staleness controller's core as its shell last
// published it (controller.Actor.Core: read-only; nil before its first
// step).
func (n *Node) ControllerCore() *controller.Core {
	if n.ctl == nil {
		return nil
	}
	return n.ctl.Core()
}

// Gatherer reads the run's metrics registry (what metrics.listen serves).
func (n *Node) Gatherer() prometheus.Gatherer { return n.reg }

// SlowConsumerDrops is what NATS dropped past a subscription's pending
// limits on the node's bus connection (natsbus.Bus.SlowConsumerDrops).
func (n *Node) SlowConsumerDrops() int64 {
	if n.bus == nil {
		return 0
	}
	return n.bus.SlowConsumerDrops()
}

// BusOutMsgs is the number of messages the node's bus connection sent.
func (n *Node) BusOutMsgs() uint64 {
	if n.bus == nil {
		return 0
	}
	return n.bus.Conn().Stats().OutMsgs
}

// EngineDrivers drive the node's engines over their HTTP API (pause,
// resume, version), built-in ones first, as the weight sync drives them.
func (n *Node) EngineDrivers() []driver.Driver {
	out := make([]driver.Driver, len(n.driven))
	for i, d := range n.driven {
		out[i] = d.Driver
	}
	return out
}

// GroupStreamHeld is what the trajectory buffer holds now: messages and
// bytes, from JetStream's stream state.
func (n *Node) GroupStreamHeld(ctx context.Context) (msgs, bytes uint64, err error) {
	if n.groupStream == nil {
		return 0, 0, nil
	}
	js, err := jetstream.New(n.bus.Conn())
	if err != nil {
		return 0, 0, fmt.Errorf("node: trajectory buffer: %w", err)
	}
	st, err := js.Stream(ctx, n.groupStream.Name())
	if err != nil {
		return 0, 0, fmt.Errorf("node: trajectory buffer %s: %w", n.groupStream.Name(), err)
	}
	info := st.CachedInfo()
	return info.State.Msgs, info.State.Bytes, nil
}

// StepCount is the number of trained steps.
func (n *Node) StepCount() int { return n.stepCount() }

// RolloutGroupsInFlight is the number of groups the rollout actors hold
// (taken, not yet reported).
func (n *Node) RolloutGroupsInFlight() int {
	c := 0
	for _, r := range n.rollouts {
		g, _ := r.InFlight()
		c += len(g)
	}
	return c
}
