package weightsync

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors/publisher/tracker"
	"github.com/asyncrl/asyncrl/cluster/weightsync/targets"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/weights/receiver"
)

// SyncTimeout bounds one engine's fetch, apply and load of a version.
const SyncTimeout = 10 * time.Minute

// Reporter is who an Agent tells about its progress: the publisher shell
// in process; an engine host (another node) only logs.
type Reporter interface {
	Fetching(name string, version int64) error
	Failed(name string, version int64, err error)
	Leave(name string)
}

// Source is where an Agent's versions come from and how they reach its
// engine: a receiver over the run's store (ReceiverSource) or the
// publisher's data plane (DataPlane.Source).
type Source interface {
	// load brings a's engine to target and returns the version it serves.
	load(ctx context.Context, a *Agent, target int64) (int64, error)
}

// AgentConfig configures one engine's Agent.
type AgentConfig struct {
	// Index is the engine's index (BeforeApply's first argument).
	Index  int
	Engine *Driven
	Source Source
	// Reporter hears of fetches, failures and a stopped engine.
	Reporter Reporter
	// Bus carries the acks, on the engine's ack subject of RunID.
	Bus   transport.Bus
	RunID string
	// Sender is the ack's Header.Sender: the engine's name in process
	// (the default), the node's name on an engine host (discovery ties
	// engines to members by it).
	Sender    string
	PauseMode string
	Logger    zerolog.Logger
	// BeforeApply is a test hook (a deliberately slow applier).
	BeforeApply func(engine int, version int64)
	// Swapped, when set, observes each successful pause → load → resume.
	Swapped prometheus.Observer
	// OnLoaded, when set, is called after the engine loaded and acked a
	// target (the engine host's catch-up events).
	OnLoaded func(engine string, version int64)
	// Fresh: the engine holds no version of the run yet, not its version
	// 0, so target 0 (the run's base) must be loaded too.
	Fresh bool
}

// Agent drives one engine's weights. Targets coalesce: while it works on
// version v, newer dispatches only raise the next target, and a receiver
// replays every delta up to it in one go.
type Agent struct {
	c       AgentConfig
	subject string
	log     zerolog.Logger

	// mu guards st, the target state machine (cluster/weightsync/targets,
	// the core the simulator steps too): Dispatch, Reack and Idle come
	// from other goroutines, the loop handles the targets.
	mu sync.Mutex
	st targets.State

	wake   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// StartAgent starts c.Engine's agent; Stop stops it.
func StartAgent(c AgentConfig) *Agent {
	if c.Sender == "" {
		c.Sender = c.Engine.Name
	}
	ctx, cancel := context.WithCancel(context.Background())
	ack, err := transport.MustPlan(c.RunID).Engine(c.Engine.Name, transport.EngineAck)
	if err != nil {
		panic(err) // a started engine's name is a valid token
	}
	a := &Agent{c: c, subject: ack,
		log: c.Logger.With().Str("engine", c.Engine.Name).Logger(), st: targets.New(0),
		wake: make(chan struct{}, 1), ctx: ctx, cancel: cancel, done: make(chan struct{})}
	if c.Fresh {
		a.st = targets.New(tracker.NoVersion)
	}
	go a.loop()
	return a
}

// Name is the agent's engine's name.
func (a *Agent) Name() string { return a.c.Engine.Name }

// Dispatch raises the agent's target to target (a target that failed is
// tried again).
func (a *Agent) Dispatch(target int64) {
	a.mu.Lock()
	a.st.Dispatch(target)
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// Idle says whether the agent has handled every target it was given (or
// its engine was stopped).
func (a *Agent) Idle() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st.Idle()
}

// Stop stops the agent and waits for its loop.
func (a *Agent) Stop() {
	a.cancel()
	<-a.done
}

// Reack acks again the version the engine serves when it is idle and
// serves version or newer (a repeated command whose ack was lost); it
// reports whether it sent one. Only the caller that dispatches should
// call it, so an agent idle here stays so until the ack is out.
func (a *Agent) Reack(ctx context.Context, version int64) (bool, error) {
	a.mu.Lock()
	have, serves := a.st.Reack(version)
	a.mu.Unlock()
	if !serves {
		return false, nil
	}
	return true, a.ack(ctx, have)
}

func (a *Agent) loop() {
	defer close(a.done)
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-a.wake:
		}
		for a.ctx.Err() == nil {
			a.mu.Lock()
			t, ok := a.st.Next()
			a.mu.Unlock()
			if !ok {
				break
			}
			a.handled(t, a.sync(t))
		}
	}
}

// handled records target t's outcome and tells who needs to know.
func (a *Agent) handled(t int64, err error) {
	o := targets.Loaded
	switch {
	case errors.Is(err, ErrEngineGone):
		o = targets.Closed
	case err != nil:
		o = targets.Failed
	}
	a.mu.Lock()
	a.st.Handled(t, o) // a failure is retried by the next dispatch (of t again, or newer)
	a.mu.Unlock()
	switch {
	case err == nil:
		if a.c.OnLoaded != nil {
			a.c.OnLoaded(a.c.Engine.Name, t)
		}
	case errors.Is(err, ErrEngineGone):
		a.c.Reporter.Leave(a.c.Engine.Name) // stopped: out of rotation for good
	case a.ctx.Err() == nil:
		a.c.Reporter.Failed(a.c.Engine.Name, t, err)
	}
}

// sync brings the engine to target through its source and acks it.
func (a *Agent) sync(target int64) error {
	// A deadline, because the NATS object store bounds a Get without one
	// by the client's default timeout (seconds), too short for a full
	// checkpoint of a real model.
	ctx, cancel := context.WithTimeout(a.ctx, SyncTimeout)
	defer cancel()
	_ = a.c.Reporter.Fetching(a.c.Engine.Name, target)
	v, err := a.c.Source.load(ctx, a, target)
	if err != nil {
		return err
	}
	return a.ack(ctx, v)
}

func (a *Agent) beforeApply(target int64) {
	if a.c.BeforeApply != nil {
		a.c.BeforeApply(a.c.Index, target)
	}
}

func (a *Agent) ack(ctx context.Context, v int64) error {
	data, err := messages.Encode(messages.EngineVersionAck{
		Header: messages.Header{RunID: a.c.RunID, Sender: a.c.Sender, Version: v}, Engine: a.c.Engine.Name, URL: a.c.Engine.URL})
	if err != nil {
		return err
	}
	return a.c.Bus.Publish(ctx, a.subject, data)
}

// ReceiverSource is a Source over a receiver of the run's store: fetch
// and apply to the receiver's copy while the engine still serves, then
// pause, load, resume — all through the engine's driver over HTTP. An
// engine on weight_load delta gets the deltas since the version it
// reports instead of the whole checkpoint; one that cannot take them (a
// gap, a refused delta) loads the receiver's full copy in the same pause.
func ReceiverSource(rcv *receiver.Receiver) Source { return receiverSource{rcv} }

type receiverSource struct{ rcv *receiver.Receiver }

func (s receiverSource) load(ctx context.Context, a *Agent, target int64) (int64, error) {
	if err := s.rcv.Fetch(ctx, target); err != nil {
		return 0, err
	}
	a.beforeApply(target)
	if _, err := s.rcv.Apply(ctx, target); err != nil {
		return 0, err
	}
	var v int64
	t0 := time.Now()
	eng := a.c.Engine
	err := eng.swap(ctx, a.c.PauseMode, func() (err error) {
		if eng.Load == config.LoadDelta {
			if v, err = s.applyDeltas(ctx, eng, target); err == nil {
				return nil
			}
			a.log.Warn().Err(err).Int64("version", target).Msg("weight sync: deltas not applied in place; loading the full checkpoint")
		}
		v, err = s.rcv.Load(receiver.LoaderFunc(func(dir string, version int64) error {
			return eng.Driver.LoadCheckpoint(ctx, dir, version)
		}))
		return err
	})
	if err != nil {
		return 0, err
	}
	if a.c.Swapped != nil {
		a.c.Swapped.Observe(time.Since(t0).Seconds())
	}
	_ = s.rcv.Prune(v - 1) // older deltas are needed again only after a reset, which refetches
	return v, nil
}

// applyDeltas sends the engine every delta after the version it serves up
// to the receiver's (the engine checks each against its own copy and
// refuses a bad one, changing nothing).
func (s receiverSource) applyDeltas(ctx context.Context, eng *Driven, target int64) (int64, error) {
	served, err := eng.Driver.ServedVersion(ctx)
	if err != nil {
		return 0, err
	}
	if served > target {
		return 0, fmt.Errorf("engine serves version %d, newer than the target %d", served, target)
	}
	for v := served + 1; v <= target; v++ {
		dir := s.rcv.DeltaDir(v)
		if _, err := os.Stat(dir); err != nil {
			return 0, fmt.Errorf("delta %d is not cached (engine at %d): %w", v, served, err)
		}
		if err := eng.Driver.ApplyDelta(ctx, dir, v); err != nil {
			return 0, err
		}
	}
	return target, nil
}
