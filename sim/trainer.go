package sim

import (
	"fmt"
	"math"
	"time"

	"github.com/asyncrl/asyncrl/actors/trainer/assemble"
	"github.com/asyncrl/asyncrl/actors/trainer/microbatch"
	"github.com/asyncrl/asyncrl/actors/trainer/steprule"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport/memhub"
)

// masked marks, in the trainer's oldest-version map, a group whose every
// loss mask the controller zeroed (zero_variance_mask).
const masked = math.MinInt64

// trainerDurable is what the trainer checkpoints: it survives a crash.
type trainerDurable struct {
	// next is the next step to train; the trainer holds version next−1.
	next int64
	// lastBatch is the input log's newest entry (written on receipt).
	lastBatch *messages.TrainBatch
}

// trainerNode is the trainer's shell in the simulator around the real
// step rule (actors/trainer/steprule, the core the trainer actor runs):
// the rule decides which batch trains, which is answered again and which
// is refused; the shell checks and packs a batch it is told to train,
// "trains" for the modelled duration, commits its durable state and
// steps the rule with Trained. Like the real trainer it has no heartbeat:
// a lost StepDone is recovered by the controller's retransmission. The
// rule is the production one (steprule.NewRetrying with the Retry of
// config.DefaultPublisher: publisher.attempts tries, waits from
// publisher.retry_backoff doubling to a minute): a failed publish is
// tried again when the rule's RetryAt comes on the virtual clock, and
// after the last try the rule gives up and the run ends on it, as
// `asyncrl run` ends on its trainer's Err.
type trainerNode struct {
	w       *world
	bus     *memhub.Bus
	durable trainerDurable
	rule    *steprule.Core // nil while down
	down    int
	inc     int
	// armed is the RetryAt a timer is set for (zero: none).
	armed time.Time
	// retries counts the rule's Publish effects (a held step's publish
	// tried again), gaveUp the step the rule gave up (0: none).
	retries int
	gaveUp  int64
	// fetchRetries counts fetches of a batch tried again (the buffer
	// was electing), fetchGaveUps those the fetch rule gave up.
	fetchRetries, fetchGaveUps int
}

// publishRetry is the Retry the run's trainer uses by default: built
// from config.DefaultPublisher by steprule.RetryOf, as cluster/node
// builds it from the run's config — no number of its own here.
func publishRetry() steprule.Retry {
	d := config.DefaultPublisher()
	return steprule.RetryOf(d.Attempts, d.RetryBackoff)
}

// newRule is the production step rule for a trainer holding version.
func newRule(version int64) *steprule.Core {
	r, err := steprule.NewRetrying(version, publishRetry())
	if err != nil {
		panic(fmt.Sprintf("sim: the default publisher retry is invalid: %v", err)) // config's defaults validate
	}
	return r
}

var (
	subjTrain = plan.Train
	subjSteps = plan.Steps
)

func newTrainer(w *world) *trainerNode {
	return &trainerNode{w: w, bus: w.hub.Connect("trainer"), durable: trainerDurable{next: 1}, rule: newRule(0)}
}

func (t *trainerNode) start() {
	t.w.subscribe(t.bus, subjTrain, func(m messages.Message) {
		if tb, ok := m.(messages.TrainBatch); ok {
			t.onBatch(tb)
		}
	})
}

func (t *trainerNode) sendDone(step, version int64) {
	t.w.send(t.bus, subjSteps, messages.StepDone{Header: messages.Header{RunID: runID, Sender: "trainer", Version: version - 1},
		Step: step, NewVersion: version})
}

func (t *trainerNode) onBatch(m messages.TrainBatch) {
	if t.down > 0 {
		t.w.logf("trainer is down: batch for step %d lost", m.Step)
		return
	}
	b := m
	b.GroupIDs = append([]string(nil), m.GroupIDs...)
	if b.Step == t.durable.next {
		t.durable.lastBatch = &b // the input log: written on receipt
	}
	t.step(steprule.Received{Batch: b})
}

// step steps the rule and carries out its Ready.
func (t *trainerNode) step(in steprule.Input) {
	t.rule.Step(t.w.hub.Now(), in)
	t.apply()
}

// apply carries out the rule's Ready until it is empty (an effect may
// step the rule again), then sets a timer for its RetryAt.
func (t *trainerNode) apply() {
	for t.rule != nil {
		rd := t.rule.Ready()
		if rd.Empty() {
			break
		}
		t.rule.Advance()
		for _, e := range rd.Effects {
			t.do(e)
		}
	}
	t.armRetry()
}

// armRetry sets a timer for the rule's RetryAt on the virtual clock (the
// real shell ticks the rule every 50 ms; the simulator ticks it at the
// very time it asked for). A timer of an earlier incarnation, or for a
// RetryAt the rule no longer holds, does nothing when it fires.
func (t *trainerNode) armRetry() {
	if t.rule == nil || t.w.done {
		return
	}
	at := t.rule.RetryAt()
	if at.IsZero() || at.Equal(t.armed) {
		return
	}
	t.armed = at
	step, _ := t.rule.Unpublished()
	inc := t.inc
	t.w.after(max(0, at.Sub(t.w.hub.Now())), fmt.Sprintf("trainer: step %d: retry wait over", step), func() {
		if t.inc != inc || t.rule == nil || !t.rule.RetryAt().Equal(at) {
			return
		}
		t.armed = time.Time{}
		t.rule.Tick(t.w.hub.Now())
		t.apply()
	})
}

func (t *trainerNode) do(e steprule.Effect) {
	switch v := e.(type) {
	case steprule.Train:
		t.train(v.Batch)
	case steprule.Publish:
		t.retries++
		t.w.logf("trainer: step %d: publish of version %d tried again", v.Step, v.Version)
		if lb := t.durable.lastBatch; lb != nil && lb.Step == v.Step && t.w.cfg.has(BugTrainerRetrainsOnRetry) {
			// The planted bug: the retry trains the step's batch again
			// (from the input log) instead of publishing its weights.
			t.w.logf("trainer: step %d: retry trains the batch again (planted bug)", v.Step)
			t.train(*lb)
			return
		}
		t.publish(v.Step)
	case steprule.Announce:
		t.w.orc.announced(v.Step, v.Version, v.Again)
		t.sendDone(v.Step, v.Version)
	case steprule.Refuse:
		t.w.fail(InvProtocol, "trainer at step %d received a batch for step %d", v.Version+1, v.Step)
	case steprule.GiveUp:
		t.giveUp(v)
	}
}

// giveUp: the rule gave up a step whose publish failed Attempts times.
// The real trainer reports it as its Err and the run (or the cluster
// term) ends on it; the simulated run ends here. The oracle checks the
// step was never announced and that the rule tried exactly as often as
// the run's config says.
func (t *trainerNode) giveUp(g steprule.GiveUp) {
	w := t.w
	t.gaveUp = g.Step
	w.logf("trainer: %s: the run ends on the trainer's error", g)
	w.orc.checks += 2
	if want := publishRetry().Attempts; g.Attempts != want {
		w.fail(InvAnnounce, "the step rule gave up step %d after %d publish tries, the run's config says %d", g.Step, g.Attempts, want)
		return
	}
	if w.orc.announcedStep >= g.Step {
		w.fail(InvAnnounce, "the step rule gave up step %d, which the trainer announced", g.Step)
		return
	}
	w.done = true
}

// fetch reads every group the batch references from the controller's
// batch store and assembles the mini-batch as the real trainer does
// (actors/trainer/assemble: ZeroMask flags, replace mode's copies). A
// reference to a released group means the trainer was asked to train a
// group whose fate the ledger already settled: trained twice when it was
// trained, otherwise a protocol fault.
func (t *trainerNode) fetch(b messages.TrainBatch) (*messages.TokenBatch, bool) {
	w := t.w
	// The oracle: a stream with no leader answers no read; a trainer that
	// reads one anyway skipped the fetch rule (tryFetch).
	w.orc.checks++
	if buf := w.ctl.buf; buf != nil && !buf.lost && buf.electing > 0 {
		w.fail(InvProtocol, "train batch for step %d: the trainer read its groups from a trajectory buffer electing a leader: the stream answers no read then", b.Step)
		return nil, false
	}
	data := make([][]byte, len(b.Groups))
	for i, g := range b.Groups {
		stored, ok := w.ctl.batches.get(g.Batch.Seq)
		if !ok {
			if og := w.orc.groups[g.GroupID]; og != nil && og.trained > 0 {
				w.fail(InvTrainedTwice, "train batch for step %d: group %s was trained and released (seq %d gone), and is sent to train again", b.Step, g.GroupID, g.Batch.Seq)
			} else {
				w.fail(InvProtocol, "train batch for step %d: group %s's batch (seq %d) was released before it was trained", b.Step, g.GroupID, g.Batch.Seq)
			}
			return nil, false
		}
		p, err := g.Batch.Resolve(g.GroupID, stored)
		if err != nil {
			w.fail(InvWire, "train batch for step %d: %v", b.Step, err)
			return nil, false
		}
		data[i] = p
	}
	tb, _, err := assemble.Batch(b, data)
	if err != nil {
		w.fail(InvWire, "train batch for step %d: %v", b.Step, err)
		return nil, false
	}
	return tb, true
}

// prepare takes the fetched, assembled batch (its groups' checksums
// verified), finds each group's oldest generated token and packs the
// trajectories into microbatches over two data-parallel ranks. It returns
// the oldest version per group and the modelled compute time.
func (t *trainerNode) prepare(b messages.TrainBatch, tb *messages.TokenBatch) (map[string]int64, time.Duration, bool) {
	w := t.w
	oldest := map[string]int64{}
	tokens := make([]int, tb.Len())
	for i := 0; i < tb.Len(); i++ {
		tr, err := tb.Trajectory(i)
		if err != nil {
			w.fail(InvWire, "train batch for step %d: %v", b.Step, err)
			return nil, 0, false
		}
		tokens[i] = len(tr.TokenIDs)
		lo, ok := oldest[tr.GroupID]
		if !ok {
			lo = math.MaxInt64
		}
		for j, v := range tr.PolicyVersions {
			if tr.LossMask[j] == 1 {
				lo = min(lo, int64(v))
			}
		}
		oldest[tr.GroupID] = lo
	}
	for g, lo := range oldest {
		if lo == math.MaxInt64 {
			oldest[g] = masked // zero_variance_mask: no token of it is trained
		}
	}
	cfg := microbatch.DefaultConfig()
	cfg.MaxTokensPerMicrobatch, cfg.DPSize = 256, 2
	plan, err := microbatch.Build(tokens, cfg)
	if err != nil {
		w.fail(InvProtocol, "microbatch plan for step %d: %v", b.Step, err)
		return nil, 0, false
	}
	// Every trajectory is trained exactly once: the plan must cover each
	// index once across ranks and microbatches.
	seen := make([]int, len(tokens))
	passes := 0
	for _, r := range plan.Ranks {
		passes = max(passes, len(r.Microbatches))
		for _, mb := range r.Microbatches {
			for _, i := range mb.Indices {
				seen[i]++
			}
		}
	}
	for i, n := range seen {
		w.orc.checks++
		if n != 1 {
			w.fail(InvTrainedTwice, "microbatch plan for step %d trains trajectory %d %d times", b.Step, i, n)
			return nil, 0, false
		}
	}
	return oldest, w.wl.TrainTime + time.Duration(passes)*20*msec, true
}

func (t *trainerNode) train(b messages.TrainBatch) {
	t.fetchThen(b, func(tb *messages.TokenBatch) { t.trainFetched(b, tb) })
}

// trainFetched trains b once its batch tb is fetched.
func (t *trainerNode) trainFetched(b messages.TrainBatch, tb *messages.TokenBatch) {
	w := t.w
	oldest, d, ok := t.prepare(b, tb)
	if !ok {
		return
	}
	inc := t.inc
	w.after(d, fmt.Sprintf("trainer: step %d trained on version %d: %v", b.Step, b.Step-1, b.GroupIDs), func() {
		if t.inc != inc {
			return // crashed meanwhile: the step is lost, the controller resends
		}
		w.orc.trainedBatch(b.Step, b.Step-1, b.GroupIDs, oldest)
		if b.Step >= t.durable.next {
			t.durable.next = b.Step + 1
		}
		t.publish(b.Step)
	})
}

// publish publishes the version step trained and, once the publish
// settles (some engine serves it), steps the rule, as the real actor
// does. A failed publish fails the step with the version stepped: the
// rule holds it unpublished (no StepDone) and tries the publish again
// when its wait is over (armRetry), or gives up.
func (t *trainerNode) publish(step int64) {
	inc := t.inc
	t.w.pub.publish(step, func(err string) {
		if t.inc != inc {
			return // crashed meanwhile: the rule that asked is gone
		}
		if err != "" && t.w.cfg.has(BugTrainerAnnouncesUnpublished) {
			// The planted bug: the shell reports the failed publish as
			// a success, so the rule announces a step no engine can get.
			t.w.logf("trainer: step %d: publish failed (%s), reported trained (planted bug)", step, err)
			t.step(steprule.Trained{Step: step, Version: step})
			return
		}
		if err != "" {
			t.w.logf("trainer: step %d: publish failed (%s)", step, err)
			t.step(steprule.Failed{Step: step, Version: step, Err: err})
			return
		}
		t.step(steprule.Trained{Step: step, Version: step})
	})
}

func (t *trainerNode) crash() {
	t.down++
	t.inc++
	t.rule = nil // the rule's queue, step in progress and retry die with it
	t.armed = time.Time{}
}

func (t *trainerNode) restart() {
	t.down--
	if t.down > 0 {
		return
	}
	// A new rule at the committed version. A committed step is never
	// trained again: the input log's batch is replayed only if its step
	// is not committed (the rule would answer it, not train it).
	t.rule = newRule(t.durable.next - 1)
	lb := t.durable.lastBatch
	switch {
	case lb == nil:
	case lb.Step >= t.durable.next:
		t.step(steprule.Received{Batch: *lb})
	case t.w.cfg.has(BugTrainerRetrainsOnRestart):
		// The planted bug: the restart restores the version before the
		// input log's batch (its commit forgotten), so the rule trains
		// the step again.
		t.w.logf("trainer: replaying input log step %d (planted bug)", lb.Step)
		t.rule = newRule(lb.Step - 1)
		t.step(steprule.Received{Batch: *lb})
	}
}
