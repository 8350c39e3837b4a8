package controller

import (
	"fmt"
	"time"

	"github.com/asyncrl/asyncrl/actors/effect"
	"github.com/asyncrl/asyncrl/actors/staleness"
	"github.com/asyncrl/asyncrl/messages"
)

// Recovery is what a restarted controller knows from its durable prompt
// ledger: the step to resume at, the mini-batch still out, the groups it
// admitted and never settled, and the prompts requeued and not yet
// admitted again. Resume builds a core from it.
type Recovery struct {
	// Step is the trainer step to resume at: the in-flight batch's step,
	// or the step after the last one whose StepDone the ledger recorded.
	Step int64
	// Epoch (≥ 1) numbers this incarnation (a restart count or the lease's
	// fencing token): group ids become promptID#epoch.seq, so no id
	// admitted before the restart is issued again (staleness.Resume).
	Epoch int64
	// InFlight is the TrainBatch sent for Step whose StepDone the ledger
	// has not seen (nil: none). Its groups, listed in Sent, count as
	// accepted (staleness.ResumeInFlight) and are marked trained by its
	// StepDone; the batch is sent again at Start.
	InFlight *messages.TrainBatch
	// Sent are InFlight's groups, one per InFlight.GroupIDs entry.
	Sent []Held
	// Lost are the other groups admitted and never settled (running, or
	// finished and not yet trained): Start requeues each (GroupRequeued,
	// reason aborted, and a "requeued" ledger entry), in this order.
	Lost []Held
	// Queued are prompts already requeued, waiting to be admitted again,
	// oldest first; they come before Lost's prompts.
	Queued []Held
}

// Held is one ledger entry a Recovery carries: a group (empty GroupID for
// a queued prompt), its prompt, and the attempt it was admitted as (for a
// queued prompt: the attempt it will be admitted as).
type Held struct {
	GroupID string
	Prompt  Prompt
	Attempt int32
}

// Resume builds a core restarted from the ledger (see Recovery). Like New,
// it sends nothing until Start, which requeues r.Lost, re-sends
// r.InFlight and admits groups.
func Resume(cfg Config, src Source, r Recovery) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if src == nil {
		return nil, fmt.Errorf("%w: nil Source", ErrInvalidConfig)
	}
	resume := staleness.Resume
	if r.InFlight != nil {
		if r.InFlight.Step != r.Step {
			return nil, fmt.Errorf("%w: Recovery.InFlight is for step %d, Recovery.Step is %d", ErrInvalidConfig, r.InFlight.Step, r.Step)
		}
		if len(r.Sent) != len(r.InFlight.GroupIDs) {
			return nil, fmt.Errorf("%w: Recovery.Sent has %d groups, InFlight %d", ErrInvalidConfig, len(r.Sent), len(r.InFlight.GroupIDs))
		}
		resume = staleness.ResumeInFlight
	} else if len(r.Sent) > 0 {
		return nil, fmt.Errorf("%w: Recovery.Sent without InFlight", ErrInvalidConfig)
	}
	ctl, err := resume(cfg.Staleness, r.Step, r.Epoch)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	c := &Core{cfg: cfg, ctl: ctl, src: src, groups: map[string]admitted{}, training: map[int64][]messages.GroupReady{}}
	for _, q := range r.Queued {
		c.requeue = append(c.requeue, queued{prompt: q.Prompt, attempt: q.Attempt})
	}
	if r.InFlight != nil {
		sent := make([]messages.GroupReady, len(r.Sent))
		for i, h := range r.Sent {
			if h.GroupID != r.InFlight.GroupIDs[i] {
				return nil, fmt.Errorf("%w: Recovery.Sent[%d] is %s, InFlight has %s", ErrInvalidConfig, i, h.GroupID, r.InFlight.GroupIDs[i])
			}
			c.groups[h.GroupID] = admitted{prompt: h.Prompt, attempt: h.Attempt, step: r.Step}
			sent[i] = messages.GroupReady{GroupID: h.GroupID, PromptID: h.Prompt.ID}
		}
		c.training[r.Step] = sent
		c.dispatched = r.Step
		tb := *r.InFlight
		c.lastTrain = &tb
	}
	c.lost = append([]Held(nil), r.Lost...)
	return c, nil
}

// recover is Start's half of Resume: the lost groups are requeued and the
// in-flight batch is sent again.
func (c *Core) recover(now time.Time) {
	for _, h := range c.lost {
		next := h.Attempt + 1
		c.enqueue(queued{prompt: h.Prompt, attempt: next})
		c.stats.RequeuedAborted++
		c.Send(c.cfg.Subjects.Settled, messages.GroupRequeued{Header: c.header(), GroupID: h.GroupID,
			PromptID: h.Prompt.ID, Reason: messages.RequeueAborted, Attempt: next, Detail: "controller restarted"})
		c.ledger(h.Prompt.ID, h.GroupID, messages.LedgerRequeued, h.Attempt)
	}
	if len(c.lost) > 0 {
		c.Log(effect.LevelInfo, "recovered", "groups admitted before the restart requeued",
			effect.Field{Key: "groups", Value: fmt.Sprint(len(c.lost))})
	}
	c.lost = nil
	if t := c.lastTrain; t != nil {
		c.stats.Resent++
		c.Send(c.cfg.Subjects.Train, *t)
		if c.cfg.ResendTrainAfter > 0 {
			c.SetTimer(timerResend, now.Add(c.cfg.ResendTrainAfter))
		} else {
			c.lastTrain = nil
		}
	}
}

// enqueue puts a prompt back for readmission (unless the planted bug
// LoseRequeued drops it).
func (c *Core) enqueue(q queued) {
	if c.cfg.Plant.LoseRequeued {
		return
	}
	c.requeue = append(c.requeue, q)
}

// Queued returns the prompts requeued and waiting to be admitted again,
// oldest first.
func (c *Core) Queued() []Prompt {
	out := make([]Prompt, len(c.requeue))
	for i, q := range c.requeue {
		out[i] = q.prompt
	}
	return out
}

// Plant holds planted bugs: switches that break the core on purpose, so
// the simulator (package sim) can prove its invariants catch each one in
// the real core rather than in a copy. Production never sets them; the
// zero value is the correct core.
type Plant struct {
	// LoseRequeued drops a requeued prompt instead of queueing it for
	// readmission (sim: requeue-loses-prompt).
	LoseRequeued bool
	// RequeueDuplicateAbort queues a prompt again on an abort of a group
	// the core no longer holds (a second report of one abort: sim's
	// controller-requeues-duplicate-abort; only issue 37's per-trajectory
	// abort reports reach it).
	RequeueDuplicateAbort bool
}
