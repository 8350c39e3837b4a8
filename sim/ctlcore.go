package sim

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"

	"github.com/asyncrl/asyncrl/actors/controller"
	"github.com/asyncrl/asyncrl/actors/effect"
	"github.com/asyncrl/asyncrl/actors/filter"
	"github.com/asyncrl/asyncrl/actors/staleness"
	"github.com/asyncrl/asyncrl/messages"
)

// The controller node's shell around the real controller and sampling
// cores: it steps them, carries out their effects and keeps the durable
// ledger a restarted core resumes from.

// Subjects the cores address. The sim's shell routes the controller's and
// the sampling core's sends by message type; only TrainBatch travels over
// the hub (to the trainer node).
var (
	subjPrompts  = plan.Prompts
	subjLedger   = plan.Ledger
	subjSettled  = plan.Settled
	subjKept     = plan.Kept
	subjFiltered = plan.Filtered
	subjCapacity = plan.Capacity
)

// promptSource is the dataset: p0, p1, … Its cursor is durable (the
// ledger's), so a restarted core does not hand out fresh prompts again.
type promptSource struct{ next int }

// Next implements controller.Source; the dataset never runs out.
func (s *promptSource) Next() (controller.Prompt, bool) {
	p := controller.Prompt{ID: "p" + strconv.Itoa(s.next)}
	s.next++
	return p, true
}

// held is one ledger entry of an admitted, unsettled group.
type held struct {
	prompt  string
	attempt int32
}

// ctlLedger is the controller's durable prompt ledger, written through
// from the core's effects: the groups admitted and not settled, the
// prompts requeued and not admitted again, the TrainBatch out and the last
// step whose StepDone the controller saw.
type ctlLedger struct {
	unsettled map[string]held
	queued    []controller.Held
	sent      *messages.TrainBatch
	stepsDone int64
}

func newLedger() *ctlLedger { return &ctlLedger{unsettled: map[string]held{}} }

func (w *world) stalenessConfig() staleness.Config {
	return staleness.Config{MaxStalenessSteps: w.wl.S, NumParallelGenerationWorkers: w.wl.W,
		MiniBatchSize: w.wl.B, StalePolicy: w.in.stalePolicy, Measure: w.cfg.Measure}
}

// filterConfig is dynamic sampling in the mode the seed drew (DAPO's
// filter mode most often; inputs.go), for the sampling core (judging) and
// the controller core (accumulating, replacing, masking).
func (c *ctlNode) filterConfig() filter.Config {
	fc := filter.DefaultConfig()
	fc.NSamplesPerPrompt, fc.TrainBatchSize = c.w.wl.N, int(c.w.wl.B)
	fc.Mode, fc.MaxSampleBatches, fc.MinReplaceRatio = c.w.in.mode, c.w.in.maxSample, c.w.in.replaceMin
	return fc
}

// coreConfig is the controller core's configuration: the staleness
// controller, group size, the run's steps, the resend interval and the
// requeue-loses-prompt plant.
func (c *ctlNode) coreConfig() controller.Config {
	w := c.w
	return controller.Config{Staleness: w.stalenessConfig(), RunID: runID, Sender: "ctl", Task: "sim",
		NSamples: w.wl.N, MaxSteps: int64(w.cfg.Steps), ResendTrainAfter: retransmit, Sampling: c.filterConfig(), Rand: c.donorRand(),
		Subjects: c.subjects(),
		Plant: controller.Plant{LoseRequeued: w.cfg.has(BugRequeueLosesPrompt),
			RequeueDuplicateAbort: w.cfg.has(BugCtlRequeuesDuplicateAbort)}}
}

// wire round-trips a message through the codec, so a core steps exactly
// what it would read off the bus.
func (c *ctlNode) wire(m messages.Message) (messages.Message, bool) {
	b, err := messages.Encode(m)
	if err == nil {
		m, err = messages.Decode(b)
	}
	if err != nil {
		c.w.fail(InvWire, "ctl: %s: %v", m.Kind(), err)
		return nil, false
	}
	return m, true
}

// stepCore steps the controller core with one message and carries out
// its effects.
func (c *ctlNode) stepCore(m messages.Message) {
	m, ok := c.wire(m)
	if !ok {
		return
	}
	c.core.Step(c.t(), m)
	c.apply(c.core.Drain())
}

// apply carries out the controller core's effects as its actor shell
// would: logs, timers, then sends in order.
func (c *ctlNode) apply(e effect.Effects[messages.Message]) {
	w := c.w
	for _, l := range e.Logs {
		switch l.RateKey {
		case "stepahead", "merge":
			// A StepDone ahead of the controller, or group batches that
			// do not merge: never provoked in a correct system.
			w.fail(InvProtocol, "controller: %s %v", l.Msg, l.Fields)
		}
		if l.Level >= effect.LevelInfo {
			w.logf("ctl: core: %s %v", l.Msg, l.Fields)
		}
	}
	for _, t := range e.Timers {
		c.armTimer(t)
	}
	for _, s := range e.Sends {
		switch m := s.Msg.(type) {
		case messages.PromptAssigned:
			c.launch(m)
		case messages.PromptLedger:
			c.onLedger(m)
		case messages.TrainBatch:
			tb := m
			c.led.sent = &tb
			w.logf("ctl: train batch for step %d: %v", m.Step, m.GroupIDs)
			w.send(c.bus, subjTrain, m)
		case messages.GroupRequeued, messages.SamplingExhausted:
			w.logf("ctl: %s", m)
		case messages.CapacityChanged:
			c.onCapacity(m)
		}
	}
}

// armTimer arms or cancels one of the core's timers on the virtual clock.
func (c *ctlNode) armTimer(t effect.Timer) {
	c.timers[t.Name]++
	if t.Cancel {
		c.raceCancel(t.Name)
		return
	}
	gen, core := c.timers[t.Name], c.core
	c.after(max(0, t.At.Sub(c.t())), "", func() {
		if c.core == core && c.timers[t.Name] == gen {
			c.core.Tick(c.t(), t.Name)
			c.apply(c.core.Drain())
		}
	})
}

// onLedger writes one ledger entry and tells the oracle.
func (c *ctlNode) onLedger(m messages.PromptLedger) {
	w, led := c.w, c.led
	c.batches.settle(m)
	switch m.State {
	case messages.LedgerConsumed:
		led.unsettled[m.GroupID] = held{prompt: m.PromptID, attempt: m.Attempt}
		if i := slices.IndexFunc(led.queued, func(q controller.Held) bool { return q.Prompt.ID == m.PromptID }); i >= 0 {
			led.queued = slices.Delete(led.queued, i, i+1)
		}
		w.orc.admit(m.GroupID, m.PromptID)
	case messages.LedgerRequeued:
		delete(led.unsettled, m.GroupID)
		led.queued = append(led.queued, controller.Held{Prompt: controller.Prompt{ID: m.PromptID}, Attempt: m.Attempt + 1})
		w.orc.settle(m.GroupID, "requeued")
	case messages.LedgerFiltered:
		delete(led.unsettled, m.GroupID)
		w.orc.settle(m.GroupID, "filtered")
	case messages.LedgerTrained:
		delete(led.unsettled, m.GroupID)
		w.orc.markedTrained(m.GroupID)
	default:
		w.fail(InvProtocol, "controller: ledger entry %s for %s in unknown state %q", m.PromptID, m.GroupID, m.State)
	}
}

// onStepDone steps the core with a StepDone; when it advanced the step,
// the ledger records it.
func (c *ctlNode) onStepDone(m messages.StepDone) {
	w := c.w
	before, sent := c.core.Staleness().Step, c.led.sent
	c.stepCore(m)
	if c.core.Staleness().Step == before || w.violation != nil {
		return
	}
	if sent == nil || sent.Step != m.Step {
		w.fail(InvProtocol, "StepDone %d advanced the controller without a batch sent for it", m.Step)
		return
	}
	if c.led.sent == sent {
		c.led.sent = nil
	}
	c.led.stepsDone = m.Step
	c.watch.StepDone(c.t())
	w.orc.stepDone(m.Step)
	w.logf("ctl: step %d done (trainer version %d)", m.Step, m.NewVersion)
	if m.Step >= int64(w.cfg.Steps) {
		w.finish()
	}
}

// judge takes a finished group from the buffer as the rollout side hands
// it on: a GroupReady with the group's token batch, stepped through the
// sampling core (the filter) and, kept or filtered, into the controller
// core. The sampling core judges on the rewards and passes the group
// through; a kept group's token batch is then encoded and stored, and the
// controller gets a reference to it (storeKept), as the sampling actor
// forwards one from the trajectory buffer (most groups are filtered;
// encoding theirs would only cost time).
func (c *ctlNode) judge(g *rgroup) {
	w := c.w
	gr := messages.GroupReady{Header: messages.Header{RunID: runID, Sender: "ctl"}, GroupID: g.id, PromptID: g.prompt,
		OldestVersion: math.MaxInt64}
	for _, t := range g.trajs {
		gr.TrajectoryIDs = append(gr.TrajectoryIDs, t.id)
		gr.Rewards = append(gr.Rewards, t.reward)
		gr.TrainedTokens = append(gr.TrainedTokens, messages.TrainedTokens(t.mask))
		gr.OldestVersion = min(gr.OldestVersion, t.minV)
		gr.Tokens += int64(len(t.ctx))
	}
	if w.cfg.has(BugStalenessFromSchedule) {
		gr.OldestVersion = staleness.UnknownVersion
	}
	in, ok := c.wire(gr)
	if !ok {
		return
	}
	c.smp.Step(c.t(), in)
	for _, s := range c.smp.Drain().Sends {
		switch m := s.Msg.(type) {
		case messages.GroupReady:
			w.logf("ctl: group %s oldest v%d: kept", m.GroupID, m.OldestVersion)
			data, err := encodeBatch(w.in.tokenRewards, g)
			if err == nil {
				m, err = c.storeKept(m, data)
			}
			if err != nil {
				w.fail(InvWire, "encode token batch of %s: %v", g.id, err)
				return
			}
			c.stepCore(m)
			continue
		case messages.GroupFiltered:
			w.logf("ctl: group %s: filtered (%s)", m.GroupID, m.Reason)
			if w.cfg.has(BugFilterLeaksCapacity) {
				continue // never told: the controller never releases it
			}
		}
		c.stepCore(s.Msg)
	}
}

// recovery reads the ledger for a restart: the step to resume at, the
// batch in flight and its groups, the other unsettled groups (requeued by
// the resumed core) and the prompts waiting to be admitted again.
func (c *ctlNode) recovery() (controller.Recovery, error) {
	w, led := c.w, c.led
	r := controller.Recovery{Step: led.stepsDone + 1, Epoch: int64(c.inc), Queued: slices.Clone(led.queued)}
	if led.sent != nil && w.cfg.has(BugCtlForgetsSentBatch) {
		w.logf("ctl: forgets the batch sent for step %d (planted bug)", led.sent.Step)
		led.sent = nil
	}
	inBatch := map[string]bool{}
	if sb := led.sent; sb != nil {
		tb := *sb
		r.Step, r.InFlight = tb.Step, &tb
		for _, id := range tb.GroupIDs {
			h, ok := led.unsettled[id]
			if !ok {
				return r, fmt.Errorf("group %s of the batch for step %d is not unsettled", id, tb.Step)
			}
			inBatch[id] = true
			r.Sent = append(r.Sent, controller.Held{GroupID: id, Prompt: controller.Prompt{ID: h.prompt}, Attempt: h.attempt})
		}
	}
	ids := make([]string, 0, len(led.unsettled))
	for id := range led.unsettled {
		if !inBatch[id] {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		h := led.unsettled[id]
		r.Lost = append(r.Lost, controller.Held{GroupID: id, Prompt: controller.Prompt{ID: h.prompt}, Attempt: h.attempt})
	}
	return r, nil
}

// heldGroups is every group the controller still holds in flight: the
// ledger's admitted, unsettled groups (running, buffered, lost with a
// buffer, waiting for a batch or in the batch being trained). A new term
// would requeue or train each of them.
func (c *ctlNode) heldGroups() map[string]bool {
	h := make(map[string]bool, len(c.led.unsettled))
	for id := range c.led.unsettled {
		h[id] = true
	}
	return h
}

// queuedPrompts are the prompts requeued and waiting to be admitted again:
// the core's queue (the ledger's while the controller is down).
func (c *ctlNode) queuedPrompts() []string {
	var out []string
	if c.down > 0 {
		for _, q := range c.led.queued {
			out = append(out, q.Prompt.ID)
		}
		return out
	}
	for _, p := range c.core.Queued() {
		out = append(out, p.ID)
	}
	return out
}
