package controller

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/asyncrl/asyncrl/actors/effect"
	"github.com/asyncrl/asyncrl/actors/filter"
	"github.com/asyncrl/asyncrl/actors/staleness"
	"github.com/asyncrl/asyncrl/messages"
)

// ErrInvalidConfig is wrapped by every error Config.Validate returns.
var ErrInvalidConfig = errors.New("controller: invalid config")

// Prompt is one problem instance handed out by a Source.
type Prompt struct {
	// ID is unique per draw; it becomes PromptAssigned.PromptID.
	ID string
	// Text is the prompt text shown to the model (may be empty when the
	// task generates it from the seed the ID carries).
	Text string
}

// Source hands out prompts. Next returns false when it is exhausted (a
// finite dataset); the controller then admits only requeued prompts. A
// Source must be deterministic (seeded), like the core that calls it.
type Source interface {
	Next() (Prompt, bool)
}

// Subjects are the subjects the core publishes on.
type Subjects struct {
	Prompts  string // PromptAssigned (rollout queue group)
	Train    string // TrainBatch (trainer)
	Capacity string // CapacityChanged
	Ledger   string // PromptLedger (durable prompt ledger)
	Settled  string // GroupAccepted / GroupRequeued / SamplingExhausted (observers)
}

// Config configures the core.
type Config struct {
	// Staleness is the staleness controller's configuration (S, W, B).
	Staleness staleness.Config
	// RunID and Sender fill every outgoing message's header.
	RunID, Sender string
	// Task names the environment written into PromptAssigned.
	Task string
	// NSamples is the group size n.
	NSamples int
	// MaxSteps stops admission once the trainer is past this step (the run
	// ends there); 0 admits forever.
	MaxSteps int64
	// ResendTrainAfter re-sends the current TrainBatch when no StepDone
	// for it arrived within this time (a trainer or worker that was not
	// listening yet, a lost message); trainers ignore a batch for a step
	// they already trained and only announce StepDone again. 0 = never.
	ResendTrainAfter time.Duration
	// Sampling is dynamic sampling at mini-batch assembly (package filter;
	// Mode, NSamplesPerPrompt, MaxSampleBatches, MinReplaceRatio,
	// ZeroVarianceTol — TrainBatchSize is Staleness.MiniBatchSize). The
	// sampling actor has already judged each group (a bad one arrives as
	// GroupFiltered); the controller counts generation batches of B
	// arrivals, fills bad slots with good groups (replace) and flags
	// zero-variance groups for the trainer to mask (zero_variance_mask).
	// A zero Mode is none.
	Sampling filter.Config
	// Rand draws replace mode's donor groups; required in replace mode.
	Rand *rand.Rand
	// Subjects to publish on.
	Subjects Subjects
	// Plant plants bugs for the simulator (resume.go); production leaves
	// it zero.
	Plant Plant
}

// Validate names the first invalid field.
func (c Config) Validate() error {
	if err := c.Staleness.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	switch {
	case c.NSamples < 1:
		return fmt.Errorf("%w: NSamples must be ≥ 1, got %d", ErrInvalidConfig, c.NSamples)
	case c.ResendTrainAfter < 0:
		return fmt.Errorf("%w: ResendTrainAfter must be ≥ 0 (0 = never), got %v", ErrInvalidConfig, c.ResendTrainAfter)
	case c.MaxSteps < 0:
		return fmt.Errorf("%w: MaxSteps must be ≥ 0 (0 = unbounded), got %d", ErrInvalidConfig, c.MaxSteps)
	case c.Subjects.Prompts == "" || c.Subjects.Train == "" || c.Subjects.Ledger == "":
		return fmt.Errorf("%w: Subjects.Prompts, Train and Ledger must be set", ErrInvalidConfig)
	}
	if c.Sampling.Mode != "" {
		s := c.Sampling
		s.TrainBatchSize = int(c.Staleness.MiniBatchSize)
		if err := s.Validate(); err != nil {
			return fmt.Errorf("%w: Sampling: %w", ErrInvalidConfig, err)
		}
		if s.Mode == filter.ModeReplace && c.Rand == nil {
			return fmt.Errorf("%w: Rand must be set in replace mode (it draws the donor groups)", ErrInvalidConfig)
		}
	}
	return nil
}

// admitted is what the core remembers of a group it handed out.
type admitted struct {
	prompt  Prompt
	attempt int32
	step    int64
}

// queued is a prompt waiting to be (re)admitted.
type queued struct {
	prompt  Prompt
	attempt int32
}

// Core is the controller actor's core: the staleness controller plus the
// prompt queue (fresh prompts from the Source, requeued ones first) and
// the mini-batch under assembly for the current step. In: GroupReady
// (kept by the filter), GroupFiltered, EpisodeAborted, StepDone. Out:
// PromptAssigned, TrainBatch, CapacityChanged, PromptLedger, GroupAccepted,
// GroupRequeued. It is a pure core (see package actors): no goroutines, I/O
// or clock. It never decodes a token batch: it decides on what the
// control messages carry (rewards, versions, token counts) and hands the
// trainer the groups' references.
type Core struct {
	effect.Effects[messages.Message]

	cfg Config
	ctl *staleness.Controller
	src Source

	requeue   []queued
	exhausted bool
	groups    map[string]admitted // admitted and not yet settled

	// batch is the mini-batch being assembled for ctl.Step(); each group
	// in it already passed CheckForTraining for that step.
	batch      []messages.GroupReady
	checked    int   // batch[:checked] passed CheckForTraining for ctl.Step()
	dispatched int64 // the last step whose TrainBatch was sent
	// training lists the groups sent for each step, settled by StepDone.
	training map[int64][]messages.GroupReady
	// lastTrain is the TrainBatch out for the current step (resent by the
	// "train" timer until its StepDone arrives).
	lastTrain *messages.TrainBatch
	// arrivals are the groups (kept and filtered) that arrived since the
	// last dispatch, in order: the generation batches of dynamic sampling.
	arrivals []arrival
	// sampled counts the generation batches sampled (replace mode) for
	// the current step.
	sampled int
	// bad holds replace mode's bad groups, accepted and unsettled, in
	// arrival order.
	bad []messages.GroupFiltered

	// lost are the groups Resume was given to requeue at Start.
	lost []Held

	stats Stats
}

// Stats are the core's own counters (the staleness controller has its own
// Metrics).
type Stats struct {
	Admitted, Trained, Filtered, RequeuedStale, RequeuedAborted int64
	// Duplicates counts messages for groups the core no longer holds
	// (a second abort of one group, a redelivery); they change nothing.
	Duplicates int64
	// Resent counts TrainBatch messages sent again for want of a StepDone.
	Resent int64
	// Dynamic sampling: groups whose slot took a good group's copy
	// (replace); generation batches discarded for too few good groups
	// (replace) or for nothing left to train once masked
	// (zero_variance_mask); trajectories whose loss mask was zeroed
	// (zero_variance_mask); times max_sample_batches was reached; groups
	// requeued then.
	Replaced, Resampled, Masked, SamplingExhausted, RequeuedSampling int64
	// GenerationBatches is, per dispatched step, the number of generation
	// batches (B finished groups each, kept or filtered) sampled to fill it.
	GenerationBatches []int
}

var _ effect.Core[messages.Message, messages.Message] = (*Core)(nil)

// New builds a core at step 1.
func New(cfg Config, src Source) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if src == nil {
		return nil, fmt.Errorf("%w: nil Source", ErrInvalidConfig)
	}
	ctl, err := staleness.New(cfg.Staleness)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return &Core{cfg: cfg, ctl: ctl, src: src, groups: map[string]admitted{}, training: map[int64][]messages.GroupReady{}}, nil
}

// Start admits the first groups (after a Resume: requeues the lost groups
// and sends the in-flight batch again first).
func (c *Core) Start(now time.Time) {
	c.recover(now)
	c.admit(now)
	c.capacity()
}

// timerResend is the timer that re-sends an unanswered TrainBatch.
const timerResend = "resend-train"

// Tick advances the idle-time accounting and re-sends the TrainBatch of
// the current step when its timer fires.
func (c *Core) Tick(now time.Time, name string) {
	c.ctl.Tick(now)
	if name != timerResend || c.lastTrain == nil || c.lastTrain.Step != c.ctl.Step() {
		return
	}
	c.stats.Resent++
	c.Log(effect.LevelWarn, "resend", "no StepDone yet; TrainBatch sent again",
		effect.Field{Key: "step", Value: fmt.Sprint(c.lastTrain.Step)})
	c.Send(c.cfg.Subjects.Train, *c.lastTrain)
	c.SetTimer(timerResend, now.Add(c.cfg.ResendTrainAfter))
}

// Step consumes one message.
func (c *Core) Step(now time.Time, in messages.Message) {
	switch m := in.(type) {
	case messages.GroupReady:
		c.ready(now, m)
	case messages.GroupFiltered:
		c.filtered(now, m)
	case messages.EpisodeAborted:
		c.aborted(now, m)
	case messages.StepDone:
		c.stepDone(now, m)
	default:
		c.Log(effect.LevelWarn, "unexpected", "controller ignores message", effect.Field{Key: "kind", Value: in.Kind().String()})
		return
	}
	c.dispatch(now)
	c.admit(now)
	c.capacity()
}

// Staleness returns the staleness controller's metrics.
func (c *Core) Staleness() staleness.Metrics { return c.ctl.Metrics() }

// Stats returns the core's counters.
func (c *Core) Stats() Stats { return c.stats }

// InFlight is the number of groups admitted and not yet settled (running,
// waiting for the trainer, or in a step not yet done).
func (c *Core) InFlight() int { return len(c.groups) }

func (c *Core) header() messages.Header {
	return messages.Header{RunID: c.cfg.RunID, Sender: c.cfg.Sender, Version: c.ctl.Version()}
}

func (c *Core) ledger(promptID, groupID string, state messages.LedgerState, attempt int32) {
	h := c.header()
	c.Send(c.cfg.Subjects.Ledger, messages.PromptLedger{Header: h, PromptID: promptID, GroupID: groupID,
		State: state, Step: c.ctl.Step(), Attempt: attempt})
}

// duplicate records a message the core cannot apply: counted, logged once
// per key, never fatal (at-least-once delivery makes it normal).
func (c *Core) duplicate(op, groupID string, err error) {
	c.stats.Duplicates++
	c.Log(effect.LevelDebug, "dup:"+op, "message for a settled or unknown group ignored",
		effect.Field{Key: "op", Value: op}, effect.Field{Key: "group", Value: groupID}, effect.Field{Key: "err", Value: err.Error()})
}

func (c *Core) ready(now time.Time, m messages.GroupReady) {
	if err := c.ctl.Accept(m.GroupID, m.OldestVersion, now); err != nil {
		c.duplicate("accept", m.GroupID, err)
		return
	}
	c.batch = append(c.batch, m) // checked for training in dispatch
	c.arrivals = append(c.arrivals, arrival{id: m.GroupID, good: true})
}

func (c *Core) filtered(now time.Time, m messages.GroupFiltered) {
	if err := c.ctl.Accept(m.GroupID, staleness.UnknownVersion, now); err != nil {
		c.duplicate("filter", m.GroupID, err)
		return
	}
	if c.cfg.Sampling.Mode == filter.ModeReplace {
		// Its slot in the generation batch is filled with a good group's
		// copy (it is consumed by the step), or released if the batch is
		// discarded: dispatchReplace settles it.
		c.bad = append(c.bad, m)
		c.arrivals = append(c.arrivals, arrival{id: m.GroupID})
		return
	}
	if err := c.ctl.Filter(m.GroupID, now); err != nil {
		panic(fmt.Sprintf("controller: filter right after accept failed: %v", err)) // broken invariant
	}
	a := c.groups[m.GroupID]
	delete(c.groups, m.GroupID)
	c.stats.Filtered++
	c.ledger(m.PromptID, m.GroupID, messages.LedgerFiltered, a.attempt)
	c.arrivals = append(c.arrivals, arrival{id: m.GroupID})
}

func (c *Core) aborted(now time.Time, m messages.EpisodeAborted) {
	if err := c.ctl.Abort(m.GroupID, now); err != nil {
		c.duplicate("abort", m.GroupID, err) // the group's other trajectories
		if c.cfg.Plant.RequeueDuplicateAbort {
			c.enqueue(queued{prompt: Prompt{ID: m.PromptID}, attempt: 1})
		}
		return
	}
	c.requeues(m.Reason)
}

// requeues carries out the staleness controller's Requeue effects.
func (c *Core) requeues(detail string) {
	for _, r := range c.ctl.Drain() {
		a, ok := c.groups[r.GroupID]
		if !ok {
			panic(fmt.Sprintf("controller: requeue of unknown group %s", r.GroupID))
		}
		delete(c.groups, r.GroupID)
		reason := messages.RequeueAborted
		switch r.Reason {
		case staleness.ReasonStale:
			reason = messages.RequeueStale
			c.stats.RequeuedStale++
			detail = fmt.Sprintf("staleness %d > %d", r.Staleness, c.cfg.Staleness.MaxStalenessSteps)
		case staleness.ReasonReleased:
			reason = messages.RequeueSampling
			c.stats.RequeuedSampling++
		default:
			c.stats.RequeuedAborted++
		}
		next := a.attempt + 1
		c.enqueue(queued{prompt: a.prompt, attempt: next})
		c.Send(c.cfg.Subjects.Settled, messages.GroupRequeued{Header: c.header(), GroupID: r.GroupID,
			PromptID: r.PromptID, Reason: reason, Attempt: next, Detail: detail})
		c.ledger(r.PromptID, r.GroupID, messages.LedgerRequeued, a.attempt)
	}
}

func (c *Core) stepDone(now time.Time, m messages.StepDone) {
	advanced, err := c.ctl.StepDone(m.Step, now)
	if err != nil {
		c.Log(effect.LevelError, "stepahead", "step done ahead of the controller ignored",
			effect.Field{Key: "err", Value: err.Error()})
		return
	}
	if !advanced {
		c.stats.Duplicates++
		return
	}
	for _, g := range c.training[m.Step] {
		a := c.groups[g.GroupID]
		delete(c.groups, g.GroupID)
		c.stats.Trained++
		c.ledger(g.PromptID, g.GroupID, messages.LedgerTrained, a.attempt)
	}
	delete(c.training, m.Step)
	if c.lastTrain != nil && c.lastTrain.Step == m.Step {
		c.lastTrain = nil
		c.CancelTimer(timerResend)
	}
}

// dispatch assembles the current step's mini-batch, by the dynamic
// sampling mode (replace: dispatchReplace; otherwise dispatchKept), unless
// one is out already.
func (c *Core) dispatch(now time.Time) {
	step := c.ctl.Step()
	if c.dispatched >= step || (c.cfg.MaxSteps > 0 && step > c.cfg.MaxSteps) {
		return
	}
	if c.cfg.Sampling.Mode == filter.ModeReplace {
		c.dispatchReplace(now, step)
		return
	}
	c.dispatchKept(now, step)
	if c.dispatched < step {
		c.checkExhausted(now, step)
	}
}

// dispatchKept checks waiting groups for the current step and sends the
// mini-batch once B groups passed. Groups are checked in arrival order;
// a stale one is requeued and the next one takes its place. In filter mode
// this is DAPO's accumulation across generation batches: the kept groups
// of as many generation batches as it takes.
func (c *Core) dispatchKept(now time.Time, step int64) {
	b := int(c.cfg.Staleness.MiniBatchSize)
	if len(c.batch) < b {
		// Check only once B groups wait: until then a group is merely
		// accepted, so dynamic sampling that gives up on the step can
		// hand it back untrained (staleness.Controller.Release), and the
		// check happens as close to training as possible.
		return
	}
	if c.cfg.Sampling.Mode == filter.ModeZeroVarianceMask && c.checked == 0 && !c.discardMasked(now) {
		return
	}
	for c.checked < len(c.batch) && c.checked < b {
		g := c.batch[c.checked]
		d, err := c.ctl.CheckForTraining(g.GroupID, now)
		if err != nil {
			panic(fmt.Sprintf("controller: check of accepted group %s: %v", g.GroupID, err))
		}
		if d.Verdict == staleness.Drop {
			c.batch = append(c.batch[:c.checked], c.batch[c.checked+1:]...)
			c.forget(g.GroupID) // a stale group is requeued, not a sampled one
			c.requeues("")
			continue
		}
		c.checked++
		c.Send(c.cfg.Subjects.Settled, messages.GroupAccepted{Header: c.header(), GroupID: g.GroupID,
			PromptID: g.PromptID, Step: step, Staleness: d.Staleness})
	}
	if c.checked < b {
		return // the checked groups wait at the head for the rest
	}
	chosen := append([]messages.GroupReady(nil), c.batch[:b]...)
	c.batch = append([]messages.GroupReady(nil), c.batch[b:]...)
	c.checked = 0
	c.send(now, step, chosen, nil, c.consume(chosen[len(chosen)-1].GroupID))
}

// send builds the mini-batch's TrainBatch (slots: the group each slot
// takes, nil = chosen in order) and sends it; batches is the number of
// generation batches it took. The TrainBatch carries the groups'
// references, never their token data: the trainer fetches and assembles.
func (c *Core) send(now time.Time, step int64, chosen []messages.GroupReady, slots []slot, batches int) {
	train, err := c.refs(chosen, slots)
	if err != nil {
		c.Log(effect.LevelError, "merge", "cannot build the mini-batch; step skipped",
			effect.Field{Key: "err", Value: err.Error()})
		return
	}
	c.dispatched = step
	c.training[step] = chosen
	c.stats.GenerationBatches = append(c.stats.GenerationBatches, batches)
	train.Header, train.Step, train.GroupIDs = c.header(), step, ids(chosen)
	c.Send(c.cfg.Subjects.Train, train)
	if c.cfg.ResendTrainAfter > 0 {
		c.lastTrain = &train
		c.SetTimer(timerResend, now.Add(c.cfg.ResendTrainAfter))
	}
}

// admit hands out prompts while the staleness controller has capacity:
// requeued prompts first (oldest first), then fresh ones from the Source.
func (c *Core) admit(now time.Time) {
	for c.ctl.Capacity() > 0 && (c.cfg.MaxSteps == 0 || c.ctl.Step() <= c.cfg.MaxSteps) {
		var q queued
		switch {
		case len(c.requeue) > 0:
			q = c.requeue[0]
		case !c.exhausted:
			p, ok := c.src.Next()
			if !ok {
				c.exhausted = true
				return
			}
			q = queued{prompt: p}
		default:
			return
		}
		adm, ok := c.ctl.TryAcquire(q.prompt.ID, now)
		if !ok {
			panic("controller: TryAcquire refused with capacity > 0") // broken invariant
		}
		if len(c.requeue) > 0 && c.requeue[0].prompt.ID == q.prompt.ID {
			c.requeue = c.requeue[1:]
		}
		c.groups[adm.GroupID] = admitted{prompt: q.prompt, attempt: q.attempt, step: adm.ScheduledStep}
		c.stats.Admitted++
		h := c.header()
		h.Version = adm.ScheduledVersion
		c.Send(c.cfg.Subjects.Prompts, messages.PromptAssigned{Header: h, PromptID: q.prompt.ID, GroupID: adm.GroupID,
			Task: c.cfg.Task, Text: q.prompt.Text, NSamples: int32(c.cfg.NSamples), Attempt: q.attempt})
		c.ledger(q.prompt.ID, adm.GroupID, messages.LedgerConsumed, q.attempt)
	}
}

// capacity publishes the controller's counters.
func (c *Core) capacity() {
	if c.cfg.Subjects.Capacity == "" {
		return
	}
	m := c.ctl.Metrics()
	c.Send(c.cfg.Subjects.Capacity, messages.CapacityChanged{Header: c.header(), Capacity: m.Capacity,
		Running: m.Running, Accepted: m.Accepted, Filtered: m.Filtered, Submitted: m.Submitted, Step: m.Step})
}

func ids(gs []messages.GroupReady) []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = g.GroupID
	}
	return out
}
