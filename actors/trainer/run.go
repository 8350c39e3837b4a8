package trainer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asyncrl/asyncrl/actors/loop"
	"github.com/asyncrl/asyncrl/actors/trainer/steprule"
)

// retryTick is how often the loop ticks the step rule while a publish
// may be retried: the resolution of publisher.retry_backoff's waits.
const retryTick = 50 * time.Millisecond

// inboxLimit is how many TrainBatches wait for the trainer's loop; a
// full inbox holds the bus's delivery (a controller's retransmissions of
// a long step pile up no further).
const inboxLimit = 16

// loop is the trainer's shell: the step rule (steprule.Core) on the
// generic RawNode loop, one batch per turn; its Ready is carried out by
// do (training happens inside it, so the loop takes the next batch only
// once the step is done).
func (a *Actor) loop() {
	defer close(a.done)
	retry := a.cfg.publishRetry()
	rule, err := steprule.NewRetrying(a.version(), retry)
	if err != nil { // Config.Validate checked it
		panic(err)
	}
	var last StepRecord // the record of the step the rule last trained
	l := &loop.Loop[steprule.Input, steprule.Ready]{Core: rule, Inbox: a.box, Batch: 1}
	if retry.Attempts > 1 {
		l.Every = retryTick // the rule's Tick tries a held step's publish again
	}
	l.Apply = func(rd steprule.Ready) {
		for _, e := range rd.Effects {
			a.do(rule, e, &last)
		}
	}
	_ = l.Run(a.ctx) // returns when Stop cancels a.ctx
}

// do carries out one effect of the step rule.
func (a *Actor) do(rule *steprule.Core, e steprule.Effect, last *StepRecord) {
	switch v := e.(type) {
	case steprule.Train:
		rec, err := a.train(v.Batch, v.From)
		a.trained(rule, v.Batch.Step, rec, err, last)
	case steprule.Publish:
		rec, err := a.publish(v.Step, v.Version)
		a.trained(rule, v.Step, rec, err, last)
	case steprule.Announce:
		rec := StepRecord{Step: v.Step, Version: v.Version} // an old step: said again, no record
		if !v.Again {
			rec = *last // the rule announces a step right after it was Trained
		}
		if err := a.announce(v.Step, v.Version, rec); err != nil {
			a.fail(v.Step, err)
		}
	case steprule.Refuse:
		a.fail(v.Step, v.Err())
	case steprule.GiveUp:
		a.fail(v.Step, a.giveUp(v))
	}
}

// giveUp is the error that ends training after the rule's GiveUp: it
// names what failed on the last try — the publish, or what follows it
// (AfterPublishError: the version was published).
func (a *Actor) giveUp(g steprule.GiveUp) error {
	var after *AfterPublishError
	if errors.As(a.pubErr, &after) {
		return fmt.Errorf("trainer: step %d: the %s of version %d failed on each of %d attempts, so training stops (publisher.attempts, publisher.retry_backoff): %w",
			g.Step, after.What, g.Version, g.Attempts, a.pubErr)
	}
	return fmt.Errorf("trainer: step %d: version %d not published after %d attempts, so training stops (publisher.attempts, publisher.retry_backoff): %w",
		g.Step, g.Version, g.Attempts, a.pubErr)
}

// trained steps the rule with the outcome of a Train or Publish. A
// failure reports the version the trainer holds now: above the one the
// step started from when only the publish failed.
func (a *Actor) trained(rule *steprule.Core, step int64, rec StepRecord, err error, last *StepRecord) {
	if err != nil {
		// Only the publish failed when the trainer holds a version above
		// the rule's: the rule tries it again, or gives up (its GiveUp
		// ends training and is logged by fail).
		onlyPublish := a.version() > rule.Version()
		if !onlyPublish {
			a.fail(step, err)
		}
		rule.Step(time.Now(), steprule.Failed{Step: step, Version: a.version(), Err: err.Error()})
		if onlyPublish && !givesUp(rule.Ready()) {
			a.cfg.Logger.Warn().Err(err).Int64("step", step).Time("retry_at", rule.RetryAt()).Msg("trainer: publish failed; it is tried again")
		}
		return
	}
	*last = rec
	rule.Step(rec.Done, steprule.Trained{Step: step, Version: rec.Version})
}

// givesUp reports whether rd ends the held step's tries.
func givesUp(rd steprule.Ready) bool {
	for _, e := range rd.Effects {
		if _, ok := e.(steprule.GiveUp); ok {
			return true
		}
	}
	return false
}

// fail logs a step's error and keeps it for Err.
func (a *Actor) fail(step int64, err error) {
	if a.ctx.Err() != nil && errors.Is(err, context.Canceled) {
		// Stop cut the step short (a fetch waiting on the buffer): not
		// a failure of the step's inputs.
		a.cfg.Logger.Info().Err(err).Int64("step", step).Msg("training step cut short: the trainer is stopping")
	} else {
		a.cfg.Logger.Error().Err(err).Int64("step", step).Msg("training step failed")
	}
	a.mu.Lock()
	a.err = err
	a.mu.Unlock()
}
