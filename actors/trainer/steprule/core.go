package steprule

import (
	"fmt"
	"strings"
	"time"

	"github.com/asyncrl/asyncrl/messages"
)

// Input is what the shell steps the core with.
type Input interface{ input() }

// Received: a TrainBatch arrived.
type Received struct{ Batch messages.TrainBatch }

// Trained: the step the core asked for (Train or Publish) trained and
// was published; Version is the (local) version the trainer now holds.
type Trained struct{ Step, Version int64 }

// Failed: the step the core asked for failed (decode, plan, train or
// publish); Version is the version the trainer holds now. A Version above
// the one the step started from says the trainer stepped and only the
// publish failed: the step's weights wait for a Publish.
type Failed struct {
	Step, Version int64
	Err           string
}

func (Received) input() {}
func (Trained) input()  {}
func (Failed) input()   {}

// Effect is what the core asks the shell to do.
type Effect interface {
	effect()
	String() string
}

// Train: train Batch (step From+1) on the version From the trainer holds,
// publish the result, then step the core with Trained or Failed.
type Train struct {
	Batch messages.TrainBatch
	From  int64
}

// Publish: publish again the weights of (local) version Version that
// step Step trained but did not publish (its publish failed), without
// training again; then step the core with Trained or Failed.
type Publish struct{ Step, Version int64 }

// Announce: send StepDone{Step, NewVersion: Version}. Again marks the
// answer to a batch of a step trained before (no record, no publish).
type Announce struct {
	Step, Version int64
	Again         bool
}

// Refuse: a batch for step Step arrived while the trainer holds Version
// and Step > Version+1; the shell reports Err().
type Refuse struct{ Step, Version int64 }

func (Train) effect()    {}
func (Publish) effect()  {}
func (Announce) effect() {}
func (Refuse) effect()   {}

func (t Train) String() string {
	return fmt.Sprintf("train step %d from version %d", t.Batch.Step, t.From)
}

func (p Publish) String() string {
	return fmt.Sprintf("publish step %d again (version %d)", p.Step, p.Version)
}

func (a Announce) String() string {
	if a.Again {
		return fmt.Sprintf("announce step %d again (version %d)", a.Step, a.Version)
	}
	return fmt.Sprintf("announce step %d (version %d)", a.Step, a.Version)
}

func (r Refuse) String() string { return r.Err().Error() }

// Err is the refusal as the trainer reports it.
func (r Refuse) Err() error {
	return fmt.Errorf("trainer: batch for step %d but the trainer holds version %d", r.Step, r.Version)
}

// Ready is the effects since the last Advance, in order.
type Ready struct{ Effects []Effect }

// Empty reports whether there is nothing to do.
func (r Ready) Empty() bool { return len(r.Effects) == 0 }

// String lists the effects, one a line (table tests, logs).
func (r Ready) String() string {
	lines := make([]string, len(r.Effects))
	for i, e := range r.Effects {
		lines[i] = e.String()
	}
	return strings.Join(lines, "\n")
}

// Core is the step rule's state: the version the trainer holds and
// published (the one it announces), the step trained but not published
// (unpublished, 0: none; held: its version), the step training or
// publishing (0: none) and the batches waiting, in arrival order.
type Core struct {
	version     int64
	unpublished int64
	held        int64
	training    int64
	queue       []messages.TrainBatch
	ready       Ready
}

// New returns the rule for a trainer holding (local) version version.
func New(version int64) *Core { return &Core{version: version} }

// Version is the (local) version the trainer holds and published: the
// newest version it announces.
func (c *Core) Version() int64 { return c.version }

// Unpublished is the step the trainer trained but could not publish (0:
// none) and the (local) version its weights are.
func (c *Core) Unpublished() (step, version int64) { return c.unpublished, c.held }

// Training is the step being trained, 0 when none.
func (c *Core) Training() int64 { return c.training }

// Waiting is the number of batches waiting behind the step being trained.
func (c *Core) Waiting() int { return len(c.queue) }

// Ready returns the effects since the last Advance.
func (c *Core) Ready() Ready { return c.ready }

// Advance forgets the Ready the shell took.
func (c *Core) Advance() { c.ready = Ready{} }

// Tick does nothing: the rule has no timer (no heartbeat; see the
// package doc). It is here for the loop's shape.
func (c *Core) Tick(time.Time) {}

// Step consumes one input. A Trained or Failed for a step that is not
// training (a late or duplicated report) is ignored. A Failed whose
// Version is above the version held keeps the step unpublished: it is not
// announced, and its next batch asks for a Publish, not a Train.
func (c *Core) Step(_ time.Time, in Input) {
	switch v := in.(type) {
	case Received:
		c.queue = append(c.queue, v.Batch)
	case Trained:
		if v.Step != c.training {
			return
		}
		c.training, c.version, c.unpublished, c.held = 0, v.Version, 0, 0
		c.emit(Announce{Step: v.Step, Version: v.Version})
	case Failed:
		if v.Step != c.training {
			return
		}
		c.training = 0
		if v.Version > c.version {
			// Trained, not published: not announced, never trained again.
			c.unpublished, c.held = v.Step, v.Version
		}
	}
	c.next()
}

// next handles waiting batches until one trains or none is left.
func (c *Core) next() {
	for c.training == 0 && len(c.queue) > 0 {
		b := c.queue[0]
		c.queue[0] = messages.TrainBatch{} // the batch's bytes go with the shell's copy
		c.queue = c.queue[1:]
		switch {
		case b.Step <= c.version:
			c.emit(Announce{Step: b.Step, Version: c.version, Again: true})
		case b.Step == c.unpublished:
			c.training = b.Step
			c.emit(Publish{Step: b.Step, Version: c.held})
		case b.Step == c.version+1:
			c.training = b.Step
			c.emit(Train{Batch: b, From: c.version})
		default:
			c.emit(Refuse{Step: b.Step, Version: c.version})
		}
	}
	if len(c.queue) == 0 {
		c.queue = nil
	}
}

func (c *Core) emit(e Effect) { c.ready.Effects = append(c.ready.Effects, e) }
