package node

import (
	"slices"
	"sync"
	"time"

	"github.com/asyncrl/asyncrl/actors/trainer"
	"github.com/asyncrl/asyncrl/model"

	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
)

// Ledger is the in-memory view of the prompt ledger and the group flow,
// built from the bus (the durable copy is the JetStream ledger stream). It
// answers "what happened to every group": each admitted group must end
// trained, filtered or requeued exactly once, or be in flight at stop.
type Ledger struct {
	mu     sync.Mutex
	groups map[string]*GroupRecord
	order  []string
	// keptSinceStep / droppedSinceStep count filter decisions since the
	// last StepDone (max_sample_batches).
	kept, dropped, droppedSinceStep int64
	stalenessMax                    int64
	// steps holds the newest trainer.RecordsKept of the nsteps StepDone
	// messages seen (step i at steps[i%RecordsKept]), one compact record
	// each (the decoded message's stats map is not kept), for a node
	// whose trainer runs elsewhere; each also goes to onStep, the run's
	// step log. With an in-process trainer its own records are the steps
	// (localTrainer). lastStep is the newest step seen.
	steps        []stepSeen
	nsteps       int
	onStep       func(trainer.StepRecord, int64, bool)
	lastStep     int64
	localTrainer bool
	// trainedThrough is the newest step whose groups the controller
	// marked trained (a trained mark carries the controller's step after
	// it advanced past the step trained).
	trainedThrough int64
	subs           []transport.Subscription
	keptSubject    string
	// exhausted is the controller's first SamplingExhausted, if any.
	exhausted *messages.SamplingExhausted
	// tokens, when set, reads the rollout tokens finished so far; it is
	// sampled when each step is logged (per-step rollout throughput).
	tokens func() int64
	// local are the groups this node's rollout actors published whose
	// fate (settled) the ledger has not seen yet: what Stop waits for.
	// Bounded by the groups in flight: an entry leaves once settled.
	local map[string]struct{}
	// step is the newest step a StepDone announced; keepAll keeps every
	// record (Options.KeepGroupRecords), else prune drops settled records
	// RecordSteps steps after their last news.
	step    int64
	keepAll bool
}

// RecordSteps is how many steps a settled group's record stays in the
// ledger view after its last message (unless Options.KeepGroupRecords):
// late messages about it (a redelivered ledger transition) still find
// it, and the view stays bounded by the groups of the last RecordSteps
// steps plus those in flight.
const RecordSteps = 100

// GroupRecord is one group's history.
type GroupRecord struct {
	GroupID, PromptID string
	Attempt           int32
	Consumed          bool
	// Reported: the rollout actor published GroupReady or EpisodeAborted.
	Reported, Aborted bool
	// Kept/Filtered: the sampling actor's decision.
	Kept, Filtered bool
	// Accepted: the controller checked it for training at step AcceptedStep.
	Accepted     bool
	AcceptedStep int64
	Staleness    int64
	// Terminal ledger states (each must be seen at most once, and at most
	// one of them).
	Trained, FilteredFinal, Requeued int
	// lastStep is the ledger's step when the record last changed.
	lastStep int64
}

// Terminal reports whether the group reached a final ledger state.
func (g *GroupRecord) Terminal() bool { return g.Trained+g.FilteredFinal+g.Requeued > 0 }

// ApplyLedger folds one PromptLedger transition into the record. It is
// exported so that a reader of the durable ledger stream (the chaos audit)
// folds events exactly as a live node does, and the two views compare.
func (g *GroupRecord) ApplyLedger(v messages.PromptLedger) {
	g.PromptID, g.Attempt = v.PromptID, v.Attempt
	switch v.State {
	case messages.LedgerConsumed:
		g.Consumed = true
	case messages.LedgerTrained:
		g.Trained++
	case messages.LedgerFiltered:
		g.FilteredFinal++
	case messages.LedgerRequeued:
		g.Requeued++
	}
}

// ApplyAccepted folds the controller's GroupAccepted into the record (see
// ApplyLedger for why it is exported).
func (g *GroupRecord) ApplyAccepted(v messages.GroupAccepted) {
	g.Accepted, g.AcceptedStep, g.Staleness = true, v.Step, v.Staleness
}

func newLedger() *Ledger {
	return &Ledger{groups: map[string]*GroupRecord{}, local: map[string]struct{}{}}
}

// settled: the sampling actor passed the group to the controller (kept or
// filtered; replace mode holds a bad group until its generation batch is
// judged), or the controller accepted it or gave it a final ledger state.
func (g *GroupRecord) settled() bool {
	return g.Terminal() || g.Kept || g.Filtered || g.Accepted
}

// published is a local rollout actor's OnReport: the group's outcome is
// going out; remember it until the ledger sees it settled.
func (l *Ledger) published(id string, _ bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if g, ok := l.groups[id]; ok && g.settled() {
		return // its fate overtook the report
	}
	l.local[id] = struct{}{}
}

// unsettledLocal lists the groups local actors published whose fate the
// ledger has not seen (sorted).
func (l *Ledger) unsettledLocal() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, 0, len(l.local))
	for id := range l.local {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// tokensNow returns the rollout tokens finished so far (ok false before
// the rollout actors are counted).
func (l *Ledger) tokensNow() (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tokens == nil {
		return 0, false
	}
	return l.tokens(), true
}

// trainerInProcess tells the ledger that the node's trainer runs in
// process: its records are the run's steps, so the ledger keeps none.
func (l *Ledger) trainerInProcess() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.localTrainer = true
}

func (l *Ledger) get(id string) *GroupRecord {
	g, ok := l.groups[id]
	if !ok {
		g = &GroupRecord{GroupID: id}
		l.groups[id] = g
		l.order = append(l.order, id)
	}
	g.lastStep = l.step
	return g
}

// prune drops the records of settled groups without news for more than
// RecordSteps steps, unless every record is kept (l.mu held). A group a
// local actor published and the ledger has not seen settle stays.
func (l *Ledger) prune() {
	if l.keepAll {
		return
	}
	kept := l.order[:0]
	for _, id := range l.order {
		g := l.groups[id]
		if _, mine := l.local[id]; !mine && g.settled() && l.step-g.lastStep > RecordSteps {
			delete(l.groups, id)
			continue
		}
		kept = append(kept, id)
	}
	clear(l.order[len(kept):])
	l.order = kept
}

func (l *Ledger) subscribe(bus transport.Bus, s transport.RunPlan) error {
	l.keptSubject = s.Kept
	for _, subj := range []string{s.Ledger, s.Settled, s.Trajectories, s.Aborted, s.Kept, s.Filtered, s.Steps} {
		sub, err := bus.Subscribe(subj, l.observe)
		if err != nil {
			l.stop()
			return err
		}
		l.subs = append(l.subs, sub)
	}
	return nil
}

func (l *Ledger) stop() {
	for _, s := range l.subs {
		_ = s.Unsubscribe()
	}
	l.subs = nil
}

func (l *Ledger) observe(m *transport.Msg) {
	msg, err := messages.Decode(m.Data)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if id := groupOf(msg); id != "" {
		defer l.forgetIfSettled(id)
	}
	switch v := msg.(type) {
	case messages.PromptLedger:
		l.get(v.GroupID).ApplyLedger(v)
		if v.State == messages.LedgerTrained {
			l.trainedThrough = max(l.trainedThrough, v.Step-1)
		}
	case messages.GroupAccepted:
		l.get(v.GroupID).ApplyAccepted(v)
		l.stalenessMax = max(l.stalenessMax, v.Staleness)
	case messages.GroupReady:
		// Seen twice: from the rollout (trajectories) and forwarded by
		// the sampling actor (groups.kept); the subject tells which.
		g := l.get(v.GroupID)
		if m.Subject == l.keptSubject {
			g.Kept = true
			l.kept++
		} else {
			g.Reported = true
		}
	case messages.GroupFiltered:
		g := l.get(v.GroupID)
		g.Filtered = true
		l.dropped++
		l.droppedSinceStep++
	case messages.EpisodeAborted:
		g := l.get(v.GroupID)
		g.Reported, g.Aborted = true, true
	case messages.SamplingExhausted:
		if l.exhausted == nil {
			l.exhausted = &v
		}
	case messages.StepDone:
		// A re-announced step (redelivered TrainBatch) is recorded once.
		if v.Step > l.lastStep {
			l.lastStep = v.Step
			if !l.localTrainer {
				l.logStep(seeStep(v, time.Now()))
			}
			l.step = max(l.step, v.Step)
			l.prune()
		}
		l.droppedSinceStep = 0
	}
}

// samplingExhausted returns the controller's first SamplingExhausted.
func (l *Ledger) samplingExhausted() (messages.SamplingExhausted, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.exhausted == nil {
		return messages.SamplingExhausted{}, false
	}
	return *l.exhausted, true
}

// stepSeen is a StepDone and when the node saw it, reduced to the
// figures a step record needs: the decoded message carries a map of its
// stats (~1 KB a step on the heap), which a run of days must not keep.
type stepSeen struct {
	step, version                  int64
	reward, loss                   float64
	entropy, gradNorm, mismatch    float64
	kl, clipFrac, mismatchSame     float64
	trainTokens, sameVersionTokens int64
	trajectories, microbatches     int32
	stalenessMax                   int32
	train, publish                 time.Duration
	at                             time.Time
}

func seeStep(m messages.StepDone, at time.Time) stepSeen {
	st := m.Stats
	return stepSeen{step: m.Step, version: m.NewVersion, reward: m.RewardMean, loss: m.Loss, entropy: st["entropy"],
		gradNorm: st["grad_norm"], mismatch: st["mismatch"], kl: st["kl"], clipFrac: st["clip_frac"],
		mismatchSame: st["mismatch_same_version"], trainTokens: int64(st["tokens"]), sameVersionTokens: int64(st["same_version_tokens"]),
		trajectories: int32(st["trajectories"]), microbatches: int32(st["microbatches"]), stalenessMax: int32(st["staleness_max"]),
		train: seconds(st["train_seconds"]), publish: seconds(st["publish_seconds"]), at: at}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// logStep keeps a remote trainer's step (the newest RecordsKept) and
// logs it. l.mu is held.
func (l *Ledger) logStep(s stepSeen) {
	if len(l.steps) < trainer.RecordsKept {
		l.steps = append(l.steps, s)
	} else {
		l.steps[l.nsteps%trainer.RecordsKept] = s
	}
	l.nsteps++
	if l.onStep != nil {
		var tok int64
		if l.tokens != nil {
			tok = l.tokens()
		}
		l.onStep(s.record(), tok, l.tokens != nil)
	}
}

// marked is the newest step whose groups the controller marked trained.
func (l *Ledger) marked() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.trainedThrough
}

// stepCount is the number of steps seen.
func (l *Ledger) stepCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.nsteps
}

// stepRecords converts the kept StepDone messages seen after the first i
// into trainer step records (the view of a node whose trainer runs
// elsewhere) and returns the next i, as trainer.Actor.StepsSince.
func (l *Ledger) stepRecords(i int) ([]trainer.StepRecord, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i = max(i, l.nsteps-len(l.steps), 0)
	if i >= l.nsteps {
		return nil, max(i, l.nsteps)
	}
	out := make([]trainer.StepRecord, 0, l.nsteps-i)
	for k := i; k < l.nsteps; k++ {
		out = append(out, l.steps[k%trainer.RecordsKept].record())
	}
	return out, l.nsteps
}

func (s stepSeen) record() trainer.StepRecord {
	return trainer.StepRecord{Step: s.step, Version: s.version, RewardMean: s.reward,
		Stats: model.StepStats{Version: s.version, Loss: s.loss, Entropy: s.entropy, GradNorm: s.gradNorm,
			Mismatch: s.mismatch, KL: s.kl, ClipFrac: s.clipFrac, Tokens: int(s.trainTokens),
			MismatchSameVersion: s.mismatchSame, SameVersionTokens: int(s.sameVersionTokens)},
		Trajectories: int(s.trajectories), Tokens: int(s.trainTokens), Microbatches: int(s.microbatches),
		StalenessMax: int64(s.stalenessMax), TrainTime: s.train, PublishTime: s.publish, Done: s.at}
}

// Snapshot returns copies of the group records in first-seen order: every
// group's with Options.KeepGroupRecords, else those in flight and those
// with news in the last RecordSteps steps.
func (l *Ledger) Snapshot() []GroupRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]GroupRecord, 0, len(l.order))
	for _, id := range l.order {
		out = append(out, *l.groups[id])
	}
	return out
}

// counts returns the filter's kept/dropped totals, the drops since the
// last step and the largest staleness accepted.
func (l *Ledger) counts() (kept, dropped, droppedSinceStep, stalenessMax int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.kept, l.dropped, l.droppedSinceStep, l.stalenessMax
}

// forgetIfSettled drops id from local once its record is settled (l.mu held).
func (l *Ledger) forgetIfSettled(id string) {
	if _, ok := l.local[id]; !ok {
		return
	}
	if g, ok := l.groups[id]; ok && g.settled() {
		delete(l.local, id)
	}
}

// groupOf is the group a ledger message is about ("" for none).
func groupOf(m messages.Message) string {
	switch v := m.(type) {
	case messages.PromptLedger:
		return v.GroupID
	case messages.GroupAccepted:
		return v.GroupID
	case messages.GroupReady:
		return v.GroupID
	case messages.GroupFiltered:
		return v.GroupID
	}
	return ""
}
