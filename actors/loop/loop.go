package loop

import (
	"context"
	"time"
)

// Readier is a core's Ready value: Empty says there is nothing to do.
type Readier interface{ Empty() bool }

// Node is the RawNode-shaped core a Loop steps.
type Node[In any, R Readier] interface {
	// Step consumes one input at time now.
	Step(now time.Time, in In)
	// Tick reports that time passed without an input.
	Tick(now time.Time)
	// Ready is what the core wants done (and said) since the last Advance.
	Ready() R
	// Advance acknowledges the last Ready: the loop is carrying it out.
	Advance()
}

// Loop steps Core with the inputs of Inbox and its ticks, and applies
// its Ready. Only the goroutine in Run (or the caller of Feed, ApplyAll
// and Poll when no Run is active) may step the core.
type Loop[In any, R Readier] struct {
	Core  Node[In, R]
	Inbox *Inbox[In]
	// Apply carries out one Ready, after Advance. It may step the core
	// (an effect's immediate answer); ApplyAll then applies the new Ready.
	Apply func(R)
	// Every is the tick interval; 0 means no ticks.
	Every time.Duration
	// Poll, when set, replaces a tick's default (Feed, then Core.Tick):
	// a shell with inputs of its own to read on a tick (cluster/node's
	// running term polls its trainer) steps them there.
	Poll func(now time.Time)
	// Batch is the most inputs stepped per turn (0: all waiting). A
	// shell whose Apply blocks (the trainer trains inside it) uses 1, so
	// an Inbox limit bounds what waits.
	Batch int
	// Done, when set, ends Run (returning nil) once it reports true; it
	// is checked after every ApplyAll.
	Done func() bool
	// Clock is the loop's time source (default time.Now).
	Clock func() time.Time
}

// Run applies, then waits for inputs or a tick, until Done or ctx ends.
func (l *Loop[In, R]) Run(ctx context.Context) error {
	var tick <-chan time.Time
	if l.Every > 0 {
		t := time.NewTicker(l.Every)
		defer t.Stop()
		tick = t.C
	}
	for {
		l.ApplyAll()
		if l.Done != nil && l.Done() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick:
			l.tick()
		case <-l.Inbox.Ready():
			l.Feed(l.now())
		}
	}
}

func (l *Loop[In, R]) tick() {
	now := l.now()
	if l.Poll != nil {
		l.Poll(now)
		return
	}
	l.Feed(now)
	l.Core.Tick(now)
}

func (l *Loop[In, R]) now() time.Time {
	if l.Clock != nil {
		return l.Clock()
	}
	return time.Now()
}

// Feed steps the core with up to Batch waiting inputs.
func (l *Loop[In, R]) Feed(now time.Time) {
	for _, in := range l.Inbox.Take(l.Batch) {
		l.Core.Step(now, in)
	}
}

// ApplyAll applies the core's Ready until it has nothing more to say.
func (l *Loop[In, R]) ApplyAll() {
	for {
		rd := l.Core.Ready()
		if rd.Empty() {
			return
		}
		l.Core.Advance()
		l.Apply(rd)
	}
}
