package sim

import (
	"time"

	"github.com/asyncrl/asyncrl/actors/trainer/fetchrule"
	"github.com/asyncrl/asyncrl/messages"
)

// fetchRule is the trainer's fetch retry rule with the run's default
// window (trainer.StreamSource's RetryFor is 0 in every shell that builds
// one: fetchrule.DefaultRetryFor).
var fetchRule = fetchrule.Rule{}

// trainerFetch is one fetch of a batch's groups in progress: its tries
// are on the fetch rule's schedule, on the virtual clock.
type trainerFetch struct {
	b     messages.TrainBatch
	inc   int       // the trainer incarnation that began it
	began time.Time // the first try
	try   int
	then  func(*messages.TokenBatch)
}

// bufferErr is what a read of the trajectory buffer (the stream the
// batch store models) gets now: a replicated buffer electing a leader
// answers "temporarily unavailable" (JetStream's 503, transport.Transient
// in the real trainer). A buffer lost with no replica is not modelled
// here: the batch store keeps its batches (docs/sim.md, not simulated).
func (t *trainerNode) bufferErr() error {
	if b := t.w.ctl.buf; b != nil && !b.lost && b.electing > 0 {
		return errBufferElecting
	}
	return nil
}

// fetchThen fetches b's groups as the real trainer's StreamSource does:
// a try the buffer fails transiently is tried again when the fetch rule
// says, and then goes on with the assembled batch; when the rule gives
// up, the step fails and the run ends on the trainer's error.
func (t *trainerNode) fetchThen(b messages.TrainBatch, then func(*messages.TokenBatch)) {
	f := &trainerFetch{b: b, inc: t.inc, began: t.w.hub.Now(), then: then}
	t.tryFetch(f)
}

func (t *trainerNode) tryFetch(f *trainerFetch) {
	w := t.w
	if t.inc != f.inc || w.done {
		return // crashed meanwhile: the step is lost, the controller resends
	}
	f.try++
	err := t.bufferErr()
	if w.cfg.has(BugTrainerFetchIgnoresElection) {
		err = nil // the planted bug: reads a buffer with no leader
	}
	if err != nil {
		elapsed := w.hub.Now().Sub(f.began)
		d := fetchRule.After(f.try, elapsed)
		if d.GiveUp {
			t.fetchGaveUp(f, err, d)
			return
		}
		t.fetchRetries++
		w.record(f.try > 1, "trainer: step %d: fetch failed (%v); try %d in %v", f.b.Step, err, f.try+1, d.Wait)
		w.after(d.Wait, "", func() { t.tryFetch(f) })
		return
	}
	tb, ok := t.fetch(f.b)
	if !ok {
		return
	}
	f.then(tb)
}

// fetchGaveUp: the rule gave up a fetch after the buffer failed every try
// for its window. The real trainer fails the step (its Err) and the run —
// or, in a cluster, the term — ends on it; the simulated run ends here.
// The oracle checks the give-up came no sooner than the rule allows (the
// last try within a wait of the window) and that the step was never
// announced.
func (t *trainerNode) fetchGaveUp(f *trainerFetch, err error, d fetchrule.Decision) {
	w := t.w
	t.fetchGaveUps++
	w.logf("trainer: step %d: fetch of %v gave up (%v): %v; the run ends on the trainer's error", f.b.Step, f.b.GroupIDs, d, err)
	w.orc.checks += 2
	if d.Elapsed+fetchrule.MaxWait < fetchRule.Window() {
		w.fail(InvAnnounce, "the trainer gave up fetching step %d's batch after %v, before the fetch rule's window (%v) less a wait", f.b.Step, d.Elapsed, fetchRule.Window())
		return
	}
	if w.orc.announcedStep >= f.b.Step {
		w.fail(InvAnnounce, "the trainer gave up fetching step %d's batch, which it announced", f.b.Step)
		return
	}
	w.done = true
}
