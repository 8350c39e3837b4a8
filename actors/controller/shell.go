package controller

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/asyncrl/asyncrl/actors"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
)

// Inputs are the subjects the controller actor listens on. All of them
// carry messages a single publisher emits in causal order per group, so
// one subscription each is enough.
type Inputs struct {
	Aborted string // EpisodeAborted from rollout actors
	Groups  string // GroupReady (kept) and GroupFiltered from the sampling actor
	Steps   string // StepDone from the trainer
}

// Actor is the running controller: a thin shell (package actors) around
// Core, bridged to the bus.
type Actor struct {
	shell *actors.Shell[messages.Message, messages.Message]
	core  atomic.Pointer[Core]
}

// Spawn starts the controller actor on sys; its sends are published on bus.
// newSource is called for every incarnation of the core (a restart after a
// panic starts from a fresh core; its durable state is the ledger stream).
func Spawn(sys *actors.System, bus transport.Bus, shellCfg actors.ShellConfig, cfg Config, in Inputs, newSource func() Source) (*Actor, error) {
	if _, err := New(cfg, newSource()); err != nil {
		return nil, err
	}
	a := &Actor{}
	factory := func() actors.Core[messages.Message, messages.Message] {
		c, err := New(cfg, newSource())
		if err != nil {
			panic(err) // validated above
		}
		a.core.Store(c)
		return c
	}
	sh, err := actors.Spawn(sys, shellCfg, factory, actors.BusSender[messages.Message]{Bus: bus, Encode: messages.Encode})
	if err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	a.shell = sh
	for _, s := range []string{in.Aborted, in.Groups, in.Steps} {
		if s == "" {
			continue
		}
		if _, err := actors.BridgeSubject(bus, s, "", messages.Decode, sh); err != nil {
			_ = sh.Stop(context.Background())
			return nil, fmt.Errorf("controller: %w", err)
		}
	}
	return a, nil
}

// Stop stops the actor after it stepped what it already accepted.
func (a *Actor) Stop(ctx context.Context) error { return a.shell.Stop(ctx) }

// Core returns the current core. Read it only after Stop (the actor owns
// it while running).
func (a *Actor) Core() *Core { return a.core.Load() }
