package sampling

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
)

// Actor is the running sampling actor: a thin shell around Core.
type Actor struct {
	shell *actors.Shell[messages.Message, messages.Message]
	core  atomic.Pointer[Core]
	// refs is the trajectory buffer's bookkeeping (nil without a
	// buffer): which stored message each forwarded group is, and the
	// deletions once the controller settled it (refs.go).
	refs *refs
}

// Buffer is the trajectory buffer the actor reads (SpawnBuffer).
type Buffer struct {
	// Stream is the buffer (RunPlan.GroupStream) the rollout actors store
	// their groups in; the actor consumes it through the durable consumer
	// "sampling".
	Stream transport.Stream
	// Ledger is the subject of the controller's PromptLedger
	// (RunPlan.Ledger). A group the controller settles there — trained,
	// filtered or requeued — is deleted from the buffer: nobody fetches it
	// again. "" deletes nothing (the buffer's MaxAge trims it).
	Ledger string
	// Logger gets a (rate-limited) line per failed deletion.
	Logger zerolog.Logger
}

// Spawn starts the sampling actor; it consumes GroupReady on groups (a
// queue subscription in queue "sampling", so several instances share the
// load) — or, when stream is not nil, from that durable stream (SpawnBuffer
// without deletions) — and publishes on cfg.Kept / cfg.Filtered through
// bus.
func Spawn(sys *actors.System, bus transport.Bus, shellCfg actors.ShellConfig, cfg Config, groups string, stream transport.Stream) (*Actor, error) {
	if stream != nil {
		return SpawnBuffer(sys, bus, shellCfg, cfg, Buffer{Stream: stream})
	}
	a, sh, err := spawn(sys, bus, shellCfg, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := actors.BridgeSubject(bus, groups, "sampling", messages.Decode, sh); err != nil {
		_ = sh.Stop(context.Background())
		return nil, fmt.Errorf("sampling: %w", err)
	}
	return a, nil
}

// SpawnBuffer starts the sampling actor on the trajectory buffer: it
// consumes buf.Stream through the consumer "sampling" (a group is acked
// once the core judged it, redelivered otherwise) and forwards a kept
// group by reference — GroupReady.Batch names the stored message (stream
// subject and sequence, the batch's size and checksum) instead of
// carrying the bytes — so the token data is written once, by the rollout
// actor, and read once, by the trainer. With buf.Ledger set, a settled
// group's stored message is deleted (a stream that supports it:
// transport.StoredReader).
func SpawnBuffer(sys *actors.System, bus transport.Bus, shellCfg actors.ShellConfig, cfg Config, buf Buffer) (*Actor, error) {
	if buf.Stream == nil {
		return nil, fmt.Errorf("%w: Buffer.Stream must be set", ErrInvalidConfig)
	}
	a, sh, err := spawn(sys, bus, shellCfg, cfg)
	if err != nil {
		return nil, err
	}
	a.refs = newRefs(buf.Stream, buf.Logger)
	fail := func(err error) (*Actor, error) {
		_ = sh.Stop(context.Background())
		a.refs.stop()
		return nil, fmt.Errorf("sampling: %w", err)
	}
	if buf.Ledger != "" {
		if err := a.refs.watch(bus, buf.Ledger); err != nil {
			return fail(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := actors.BridgeStreamMsg(ctx, buf.Stream, "sampling", 30*time.Second, a.refs.decode, sh); err != nil {
		return fail(err)
	}
	return a, nil
}

func spawn(sys *actors.System, bus transport.Bus, shellCfg actors.ShellConfig, cfg Config) (*Actor, *actors.Shell[messages.Message, messages.Message], error) {
	if _, err := New(cfg); err != nil {
		return nil, nil, err
	}
	a := &Actor{}
	factory := func() actors.Core[messages.Message, messages.Message] {
		c, _ := New(cfg)
		a.core.Store(c)
		return c
	}
	sh, err := actors.Spawn(sys, shellCfg, factory, actors.BusSender[messages.Message]{Bus: bus, Encode: messages.Encode})
	if err != nil {
		return nil, nil, fmt.Errorf("sampling: %w", err)
	}
	a.shell = sh
	return a, sh, nil
}

// Stop stops the actor after it stepped what it already accepted.
func (a *Actor) Stop(ctx context.Context) error {
	err := a.shell.Stop(ctx)
	if a.refs != nil {
		a.refs.stop()
	}
	return err
}

// Core returns the current core; read it only after Stop.
func (a *Actor) Core() *Core { return a.core.Load() }

// Released is how many stored groups the actor deleted from the buffer
// once settled, and how many it held references to, not yet settled.
func (a *Actor) Released() (deleted, held int) {
	if a.refs == nil {
		return 0, 0
	}
	return a.refs.counts()
}
