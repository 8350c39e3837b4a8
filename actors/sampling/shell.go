package sampling

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/asyncrl/asyncrl/actors"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
)

// Actor is the running sampling actor: a thin shell around Core.
type Actor struct {
	shell *actors.Shell[messages.Message, messages.Message]
	core  atomic.Pointer[Core]
}

// Spawn starts the sampling actor; it consumes GroupReady on groups (a
// queue subscription in queue "sampling", so several instances share the
// load) — or, when stream is not nil, from that durable stream through the
// consumer "sampling" (acked once the core judged the group, redelivered
// otherwise) — and publishes on cfg.Kept / cfg.Filtered through bus.
func Spawn(sys *actors.System, bus transport.Bus, shellCfg actors.ShellConfig, cfg Config, groups string, stream transport.Stream) (*Actor, error) {
	if _, err := New(cfg); err != nil {
		return nil, err
	}
	a := &Actor{}
	factory := func() actors.Core[messages.Message, messages.Message] {
		c, _ := New(cfg)
		a.core.Store(c)
		return c
	}
	sh, err := actors.Spawn(sys, shellCfg, factory, actors.BusSender[messages.Message]{Bus: bus, Encode: messages.Encode})
	if err != nil {
		return nil, fmt.Errorf("sampling: %w", err)
	}
	a.shell = sh
	var berr error
	if stream != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, berr = actors.BridgeStream(ctx, stream, "sampling", 30*time.Second, messages.Decode, sh)
		cancel()
	} else {
		_, berr = actors.BridgeSubject(bus, groups, "sampling", messages.Decode, sh)
	}
	if berr != nil {
		_ = sh.Stop(context.Background())
		return nil, fmt.Errorf("sampling: %w", berr)
	}
	return a, nil
}

// Stop stops the actor after it stepped what it already accepted.
func (a *Actor) Stop(ctx context.Context) error { return a.shell.Stop(ctx) }

// Core returns the current core; read it only after Stop.
func (a *Actor) Core() *Core { return a.core.Load() }
