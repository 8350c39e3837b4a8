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

// GiveUp: the held step's publish failed Attempts times (Retry.Attempts):
// the rule publishes it no more; the shell ends training with the
// failure (the run ends on it). Err is the last publish's error.
type GiveUp struct {
	Step, Version int64
	Attempts      int
	Err           string
}

func (Train) effect()    {}
func (Publish) effect()  {}
func (Announce) effect() {}
func (Refuse) effect()   {}
func (GiveUp) effect()   {}

func (g GiveUp) String() string {
	return fmt.Sprintf("give up step %d: version %d not published after %d attempts: %s", g.Step, g.Version, g.Attempts, g.Err)
}

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

// Retry is how often and when a held step's publish is tried again.
type Retry struct {
	// Attempts is how many times a step's publish is tried in all (the
	// one after training included) before the rule gives up (GiveUp);
	// ≥ 1. Between them the rule waits, and a retransmission of the
	// step's batch does not publish sooner.
	Attempts int
	// Backoff is the wait after the first failed try; each later wait
	// doubles, up to MaxBackoff (≥ Backoff; 0: no cap).
	Backoff, MaxBackoff time.Duration
}

// MaxBackoffCap caps the doubling waits of RetryOf: a publish that keeps
// failing is tried at least once a minute.
const MaxBackoffCap = time.Minute

// RetryOf is the Retry of publisher.attempts and publisher.retry_backoff:
// attempts tries, the first wait backoff, doubling up to MaxBackoffCap
// (or backoff, if longer). The trainer of `asyncrl run` and the cluster
// and the simulator's trainer build their rule from it, so the simulator
// steps the configuration production runs.
func RetryOf(attempts int, backoff time.Duration) Retry {
	return Retry{Attempts: attempts, Backoff: backoff, MaxBackoff: max(MaxBackoffCap, backoff)}
}

// Validate names the first bad field.
func (r Retry) Validate() error {
	switch {
	case r.Attempts < 1:
		return fmt.Errorf("steprule: Retry.Attempts %d: want ≥ 1", r.Attempts)
	case r.Backoff < 0:
		return fmt.Errorf("steprule: Retry.Backoff %v: want ≥ 0", r.Backoff)
	case r.MaxBackoff != 0 && r.MaxBackoff < r.Backoff:
		return fmt.Errorf("steprule: Retry.MaxBackoff %v: want 0 or ≥ Backoff %v", r.MaxBackoff, r.Backoff)
	}
	return nil
}

// wait is the wait after the n-th failed try (n ≥ 1).
func (r Retry) wait(n int) time.Duration {
	d := r.Backoff
	for i := 1; i < n && (r.MaxBackoff == 0 || d < r.MaxBackoff) && d < time.Hour; i++ {
		d *= 2
	}
	if r.MaxBackoff > 0 {
		d = min(d, r.MaxBackoff)
	}
	return d
}

// Core is the step rule's state: the version the trainer holds and
// published (the one it announces), the step trained but not published
// (unpublished, 0: none; held: its version; tries: its publish's tries so
// far; retryAt: when it is tried again, zero for not yet or never, once
// given up), the step training or publishing (0: none) and the batches
// waiting, in arrival order.
type Core struct {
	retry       *Retry // nil: published again only on a retransmission, never given up
	version     int64
	unpublished int64
	held        int64
	tries       int
	retryAt     time.Time
	training    int64
	queue       []messages.TrainBatch
	ready       Ready
}

// New returns the rule for a trainer holding (local) version version,
// without timed retries: a held step is published again on each
// retransmission of its batch, and never given up. No shell builds it
// (the trainer actor and the simulator's trainer use NewRetrying); its
// tests state the retransmission rule without timing.
func New(version int64) *Core { return &Core{version: version} }

// NewRetrying returns the rule for a trainer holding (local) version
// version whose held step's publish is tried again as r says (the
// trainer actor's: publisher.attempts, publisher.retry_backoff).
func NewRetrying(version int64, r Retry) (*Core, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &Core{version: version, retry: &r}, nil
}

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

// RetryAt is when the held step's publish is tried again (zero: no
// retry is waiting).
func (c *Core) RetryAt() time.Time { return c.retryAt }

// Tick tries the held step's publish again once its wait is over (a rule
// with Retry; no heartbeat otherwise, see the package doc).
func (c *Core) Tick(now time.Time) {
	if c.training != 0 || c.unpublished == 0 || c.retryAt.IsZero() || now.Before(c.retryAt) {
		return
	}
	c.retryAt = time.Time{}
	c.training = c.unpublished
	c.emit(Publish{Step: c.unpublished, Version: c.held})
}

// Step consumes one input. A Trained or Failed for a step that is not
// training (a late or duplicated report) is ignored. A Failed whose
// Version is above the version held keeps the step unpublished: it is not
// announced, and its next batch asks for a Publish, not a Train.
func (c *Core) Step(now time.Time, in Input) {
	switch v := in.(type) {
	case Received:
		c.queue = append(c.queue, v.Batch)
	case Trained:
		if v.Step != c.training {
			return
		}
		c.training, c.version, c.unpublished, c.held = 0, v.Version, 0, 0
		c.tries, c.retryAt = 0, time.Time{}
		c.emit(Announce{Step: v.Step, Version: v.Version})
	case Failed:
		if v.Step != c.training {
			return
		}
		c.training = 0
		if v.Version > c.version {
			// Trained, not published: not announced, never trained again.
			c.unpublished, c.held = v.Step, v.Version
			c.publishFailed(now, v)
		}
	}
	c.next()
}

// publishFailed counts a failed try of the held step's publish and, with
// a Retry, schedules the next one or gives up.
func (c *Core) publishFailed(now time.Time, v Failed) {
	c.tries++
	if c.retry == nil {
		return
	}
	if c.tries >= c.retry.Attempts {
		c.emit(GiveUp{Step: v.Step, Version: v.Version, Attempts: c.tries, Err: v.Err})
		return
	}
	c.retryAt = now.Add(c.retry.wait(c.tries))
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
		case b.Step == c.unpublished && c.retry != nil:
			// A retransmission of the held step: its publish is tried
			// when its wait is over (Tick), or never again (gave up);
			// the Announce of a publish that succeeds answers it.
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
