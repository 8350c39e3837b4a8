package scale

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/asyncrl/asyncrl/actors/rollout"
	"github.com/asyncrl/asyncrl/engine/driver"
)

// A level's lifecycle after start: its counters, when it has settled,
// the start barrier, and stopping it.

func (l *level) stats() rollout.Stats {
	var t rollout.Stats
	if l.node == nil {
		return t
	}
	for _, s := range l.node.RolloutStats() {
		t.Add(s)
	}
	return t
}

// settled: the source is spent, every admitted group was judged (or
// aborted) and no rollout actor holds a group.
func (l *level) settled() bool {
	if l.src.n.Load() < l.src.total {
		return false
	}
	st := l.stats()
	judged, reported := l.kept.Load()+l.filtered.Load(), st.GroupsReady+st.GroupsAborted
	if judged < st.GroupsReady || reported < l.src.total {
		return false
	}
	// Every group the controller admitted was reported by a rollout
	// actor, and no requeued prompt waits to be admitted again.
	if reported < l.admitted.Load() || l.requeued.Load() != l.reconsumed.Load() {
		return false
	}
	if l.node.RolloutGroupsInFlight() > 0 {
		return false
	}
	// The controller may still be stepping a verdict or a step that
	// requeues a group (an overloaded one, late): settled only once all of
	// this held still for settleQuiet.
	key := [5]int64{judged, reported, l.admitted.Load(), l.requeued.Load(), int64(l.node.StepCount())}
	if key != l.settleKey || l.settleAt.IsZero() {
		l.settleKey, l.settleAt = key, time.Now()
		return false
	}
	return time.Since(l.settleAt) >= settleQuiet
}

// settleQuiet is how long settled's counters must hold still (a
// controller with a mailbox of 4 once requeued a group after the level
// looked settled: TestOverloadedControllerLosesNothing lost it).
const settleQuiet = 300 * time.Millisecond

// finish stops the pipeline and fills the counters.
func (l *level) finish(r *Result) {
	// Read before the pipeline stops: the bus closes with it.
	r.SlowConsumerDrops = l.node.SlowConsumerDrops()
	l.stopNode()
	st := l.stats()
	r.Started, r.Finished, r.Aborted = st.Started, st.Finished, st.Aborted
	r.GroupsKept, r.GroupsFiltered, r.GroupsAdmitted = l.kept.Load(), l.filtered.Load(), l.admitted.Load()
	r.Turns = l.turns.Load()
	r.Steps = int64(l.node.StepCount())
	r.MailboxDrops = int64(l.metricSum("asyncrl_actor_mailbox_dropped_total"))
	r.MailboxWaits = int64(l.metricSum("asyncrl_actor_mailbox_waits_total"))
	r.MailboxWaitSeconds = l.metricSum("asyncrl_actor_mailbox_wait_seconds_total")
	r.StoreRetries = st.StoreRetries
	r.Errors = st.Aborted + l.routerErrs.Load() + st.GroupsUnstored + r.MailboxDrops + r.SlowConsumerDrops
	r.Lost = st.Started - st.Finished - st.Aborted
	if c := l.node.ControllerCore(); c != nil {
		m := c.Staleness()
		r.Lost += m.Running * int64(l.o.NSamples)
		if acc := m.Accepted + m.Filtered + m.Aborted + m.StaleDropped + m.Released + m.Running; acc != m.Submitted {
			r.Failure = fmt.Sprintf("controller counters do not add up: submitted %d, accounted %d", m.Submitted, acc)
		}
		if m.Submitted != r.GroupsAdmitted {
			r.Failure = fmt.Sprintf("controller submitted %d groups, ledger saw %d admitted", m.Submitted, r.GroupsAdmitted)
		}
	}
	if r.GroupsKept+r.GroupsFiltered != st.GroupsReady {
		r.Failure = fmt.Sprintf("%d groups ready, %d judged", st.GroupsReady, r.GroupsKept+r.GroupsFiltered)
	}
}

// metricSum sums the counter name over its labels (the actor shells').
func (l *level) metricSum(name string) float64 {
	mfs, err := l.node.Gatherer().Gather()
	if err != nil {
		return 0
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// stopNode stops the pipeline (rollout actors first, then the other
// actors, router, engines and bus; idempotent).
func (l *level) stopNode() {
	if l.stopped || l.node == nil {
		return
	}
	l.stopped = true
	l.node.Stop()
}

// hold pauses every engine for the start barrier (Options.StartHold),
// before the pipeline starts, and reports whether it did. Paused with
// "wait", the engines hold requests and stay healthy.
func (l *level) hold(ctx context.Context) (bool, error) {
	if l.o.StartHold <= 0 {
		return false, nil
	}
	l.held = true
	for _, e := range l.engs {
		if err := e.Pause(ctx, string(driver.PauseWait), false); err != nil {
			return false, errors.Join(fmt.Errorf("scale: start barrier: %w", err), l.release(ctx))
		}
	}
	return true, nil
}

// release ends the start barrier over the engines' HTTP API (as weight
// sync drives any vLLM): the held requests go to the engines.
func (l *level) release(ctx context.Context) error {
	if !l.held {
		return nil
	}
	l.held = false
	if l.node == nil || !l.started {
		for _, e := range l.engs {
			e.Resume()
		}
		return nil
	}
	var errs []error
	for _, d := range l.node.EngineDrivers() {
		if err := d.Resume(ctx); err != nil {
			errs = append(errs, fmt.Errorf("scale: releasing the start barrier: %w", err))
		}
	}
	return errors.Join(errs...)
}

func (l *level) stop() {
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	_ = l.release(rctx) // a level that failed while held; the engines close below anyway
	rcancel()
	for _, s := range l.subs {
		_ = s.Unsubscribe()
	}
	l.stopNode()
	if !l.owned {
		for _, e := range l.engs {
			e.Close()
		}
	}
	if l.dataDir != "" {
		_ = os.RemoveAll(l.dataDir)
	}
}
