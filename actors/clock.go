package actors

import (
	"sort"
	"sync"
	"time"
)

// Clock is the shell's source of time and its timer scheduler. Production
// uses RealClock; tests and deterministic simulation use ManualClock, so a
// test decides exactly when timers and supervised restarts happen.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	Scheduler
}

// Scheduler arms one-shot timers. The shell uses it for core timers (the
// callback only posts a tick message to the actor, so the core stays
// single-threaded) and for supervised restarts.
type Scheduler interface {
	// AfterFunc calls f once, at least d after now, on a goroutine it does
	// not promise anything else about. stop disarms it and reports whether it
	// did so before f was called.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// RealClock is the wall clock.
type RealClock struct{}

var _ Clock = RealClock{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// AfterFunc wraps time.AfterFunc.
func (RealClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// ManualClock is a Clock that moves only when told to. Timers fire inside
// Advance/Set, synchronously on the caller's goroutine, in deadline order
// (ties in arming order), with Now equal to each timer's deadline while it
// runs. It is safe for concurrent use.
type ManualClock struct {
	mu     sync.Mutex
	now    time.Time
	seq    uint64
	timers map[uint64]*manualTimer
}

type manualTimer struct {
	id uint64
	at time.Time
	f  func()
}

var _ Clock = (*ManualClock)(nil)

// NewManualClock returns a clock reading start.
func NewManualClock(start time.Time) *ManualClock {
	return &ManualClock{now: start, timers: map[uint64]*manualTimer{}}
}

// Now returns the clock's current time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc arms f for Now()+d. A non-positive d runs f before returning,
// matching time.AfterFunc's "as soon as possible".
func (c *ManualClock) AfterFunc(d time.Duration, f func()) func() bool {
	if d <= 0 {
		f()
		return func() bool { return false }
	}
	c.mu.Lock()
	c.seq++
	t := &manualTimer{id: c.seq, at: c.now.Add(d), f: f}
	c.timers[t.id] = t
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, ok := c.timers[t.id]; !ok {
			return false
		}
		delete(c.timers, t.id)
		return true
	}
}

// Advance moves the clock forward by d, firing every timer that comes due.
func (c *ManualClock) Advance(d time.Duration) {
	c.Set(c.Now().Add(d))
}

// Set moves the clock to t (never backwards), firing every timer due by t.
// Timers armed by a firing callback fire too if they are due by t.
func (c *ManualClock) Set(t time.Time) {
	for {
		c.mu.Lock()
		next := c.nextLocked()
		if next == nil || next.at.After(t) {
			if t.After(c.now) {
				c.now = t
			}
			c.mu.Unlock()
			return
		}
		delete(c.timers, next.id)
		if next.at.After(c.now) {
			c.now = next.at
		}
		c.mu.Unlock()
		next.f()
	}
}

func (c *ManualClock) nextLocked() *manualTimer {
	var best *manualTimer
	for _, t := range c.timers {
		if best == nil || t.at.Before(best.at) || (t.at.Equal(best.at) && t.id < best.id) {
			best = t
		}
	}
	return best
}

// Pending returns the deadlines of the armed timers, earliest first. Tests
// poll it to learn that an actor has armed a timer before advancing.
func (c *ManualClock) Pending() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]time.Time, 0, len(c.timers))
	for _, t := range c.timers {
		out = append(out, t.at)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}
