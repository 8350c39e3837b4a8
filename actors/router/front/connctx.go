package front

import (
	"context"
	"sync"
	"time"
)

// connCtx is a fast-front connection's context (its requests' reqCtx):
// it ends when the client goes away (the disconnect watch) or the
// connection ends. The upstream client registers a function on it once
// per request, to abort its read when the client goes away; with
// context.AfterFunc on a context.WithCancel context that was four
// allocations, a map entry and a removal per request. Its AfterFunc
// method (which upstream.AfterFunc calls directly, and the context package uses
// for contexts derived from this one) puts the first registration in a
// slot in the struct, with a stop function bound once. A registration
// while the slot is taken (a configured Transport derives contexts that
// can overlap) goes to an ordinary cancel context that ends with this one.
//
// Each stop function must be called at most once (the upstream client
// and the context package do so): the slot's stop function clears
// whatever registration holds the slot.
type connCtx struct {
	mu       sync.Mutex
	done     chan struct{} // made on first Done, or closed at cancel
	err      error
	slot     func()
	stopSlot func() bool
	over     context.Context // registrations while the slot is taken
	overStop context.CancelFunc
}

func newConnCtx() *connCtx {
	c := &connCtx{}
	c.stopSlot = c.clearSlot
	return c
}

func (c *connCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *connCtx) Value(any) any               { return nil }

func (c *connCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *connCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		if c.err != nil {
			close(c.done)
		}
	}
	return c.done
}

// AfterFunc arranges for f to run in its own goroutine once the context
// ends (at once if it has); the stop function returned unregisters it
// and reports whether it did so before f started.
func (c *connCtx) AfterFunc(f func()) func() bool {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	if c.slot == nil {
		c.slot = f
		c.mu.Unlock()
		return c.stopSlot
	}
	if c.over == nil {
		c.over, c.overStop = context.WithCancel(context.Background())
	}
	over := c.over
	c.mu.Unlock()
	return context.AfterFunc(over, f)
}

func (c *connCtx) clearSlot() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	had := c.slot != nil
	c.slot = nil
	return had
}

// cancel ends the context (context.Canceled) and runs what was registered.
func (c *connCtx) cancel() {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = context.Canceled
	if c.done == nil {
		c.done = make(chan struct{})
	}
	close(c.done)
	f, overStop := c.slot, c.overStop
	c.slot = nil
	c.mu.Unlock()
	if f != nil {
		go f()
	}
	if overStop != nil {
		overStop()
	}
}
