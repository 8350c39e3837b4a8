package sim

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/asyncrl/asyncrl/actors/rollout/outcome"
	"github.com/asyncrl/asyncrl/cluster/termwatch"
)

// The controller's term (issue 20): the trajectory buffer it depends on,
// and the real termwatch core deciding when the term must step down.
const (
	// probeEvery is how often the term probes its buffer and ticks its
	// watch (cluster/node probes its streams every second).
	probeEvery = time.Second
	// bufferRetry: a delivery the buffer cannot make now is tried again
	// this much later (a store is retried on the rollout's schedule).
	bufferRetry = 250 * msec
	// termHandover is how long after a step-down the next term starts
	// (the lease given up, then won by a standby or the same node).
	termHandover = time.Second
	// depGroups is the buffer's name as a dependency of the term.
	depGroups = "groups"
)

// Probe errors of the buffer, as the term sees them.
var (
	errBufferElecting = errors.New("no leader (electing)")
	errBufferLost     = errors.New("stream not found (its server died and it had no replica)")
)

// termConfig is the sim's termwatch bounds. UnhealthyAfter is the real
// default (30 s): above the 4–9 s leader election of a replicated stream,
// so an election alone never steps a term down. StallAfter is scaled to
// the simulated run, three times ProgressBound, so a deadlock is still
// reported by InvProgress instead of being papered over by a new term.
func termConfig(cfg Config) termwatch.Config {
	return termwatch.Config{StallAfter: 3 * cfg.ProgressBound, UnhealthyAfter: termwatch.DefaultConfig().UnhealthyAfter}
}

// stepDownBound is how long a term whose buffer was lost may take to step
// down: the first failed probe comes at most probeEvery after the loss,
// and the watch steps down at the tick UnhealthyAfter after it.
func stepDownBound(cfg Config) time.Duration { return termConfig(cfg).UnhealthyAfter + probeEvery }

// trajBuffer is a term's trajectory buffer: in the real system a
// JetStream stream of its own, holding each finished group from its store
// until the judge (the dynamic-sampling consumer) has decided on it and
// acked it. The stream lives on one server. When that server dies a
// replicated buffer is unavailable while its peers elect a leader (stores
// fail and are retried, deliveries wait; nothing is lost); an
// unreplicated one is gone with the groups in it, and every store fails
// until a new term creates a fresh buffer.
type trajBuffer struct {
	// groups: stored, not yet taken by the judge, in store order.
	groups []*rgroup
	// electing counts leader elections in progress (faults compose).
	electing int
	lost     bool
	lostAt   time.Duration
	// lostBy are the faults that lost it: they heal when a new term
	// replaces the buffer.
	lostBy []*fault
}

// err is what a store, a delivery or a probe gets now.
func (b *trajBuffer) err() error {
	switch {
	case b.lost:
		return errBufferLost
	case b.electing > 0:
		return errBufferElecting
	}
	return nil
}

// startTerm begins a term: a fresh buffer and a fresh watch, probing every
// probeEvery.
func (c *ctlNode) startTerm() {
	w := c.w
	wt, err := termwatch.New(termConfig(w.cfg), c.t())
	if err != nil {
		panic(fmt.Sprintf("sim: %v", err)) // termConfig is valid for every valid Config
	}
	c.buf, c.watch = &trajBuffer{}, wt
	c.probeLoop()
}

func (c *ctlNode) probeLoop() {
	c.after(probeEvery, "", func() {
		if c.w.finished {
			return // the run is over: no term any more
		}
		if c.probe() {
			c.probeLoop()
		}
	})
}

// probe probes the buffer, feeds the result to the watch and ticks it;
// when the watch says down, the term steps down. It reports whether the
// term goes on.
func (c *ctlNode) probe() bool {
	w := c.w
	now := c.t()
	err := c.buf.err()
	if w.cfg.has(BugTermIgnoresLostBuffer) {
		err = nil
	}
	c.watch.Probe(now, depGroups, err)
	c.watch.Tick(now)
	for _, e := range c.watch.Ready() {
		w.logf("ctl: %s", e)
	}
	e, down := c.watch.Down()
	if !down {
		return true
	}
	c.stepDowns++
	if e.Reason == termwatch.NoStep {
		c.noStepDowns++
	}
	w.logf("ctl: term %d steps down (%s): the next term starts from the ledger in %v", c.inc, e.Reason, termHandover)
	c.crash()
	w.after(termHandover, "ctl: next term", c.restart)
	return false
}

// groupReady stores a finished group in the buffer. While the buffer
// fails, the group stays with the rollout side (c.groups) and the store is
// retried; the judge takes it a consumer's lag after it was stored.
func (c *ctlNode) groupReady(g *rgroup) {
	c.oddGroup(g)
	c.storeGroup(g, false)
}

// storeGroup is the rollout actor's store (actors/rollout storeGroup, on
// the outcome core's schedule): a failed try is tried again every
// StoreRetryWait(DefaultStoreRetry) (500 ms) until DefaultStoreFor (60 s)
// has passed since the store began; then the store gives up, the group is
// Aborted (Unstored) and its report requeues the prompt. A buffer that
// fails that long fails its probes too, so the term's watch steps the
// term down (UnhealthyAfter, 30 s) first, and the crash takes the store
// with it: in this world the give-up is never reached (docs/sim.md).
func (c *ctlNode) storeGroup(g *rgroup, retry bool) {
	w := c.w
	if !retry {
		g.storeBegan = c.t()
	}
	if err := c.buf.err(); err != nil {
		if outcome.StoreGivesUp(g.storeBegan, c.t(), outcome.DefaultStoreFor) {
			w.logf("ctl: store of %s gave up after %v: %v", g.id, outcome.DefaultStoreFor, err)
			c.stored(g, err.Error())
			return
		}
		w.record(retry, "ctl: store %s in the buffer failed: %v%s", g.id, err, retryNote(retry))
		c.after(outcome.StoreRetryWait(outcome.DefaultStoreRetry), "", func() { c.storeGroup(g, true) })
		return
	}
	if !c.stored(g, "") {
		return
	}
	delete(c.groups, g.id)
	b := c.buf
	b.groups = append(b.groups, g)
	lag := time.Duration(10+w.rng.Intn(90)) * msec
	w.logf("ctl: stored %s in the buffer", g.id)
	c.after(lag, "", func() { c.deliver(b, g, false) })
}

// deliver hands a buffered group to the judge, or waits while the buffer
// has no leader. A group lost with its buffer, or whose term was replaced,
// is never delivered: the ledger still has it, and the next term requeues it.
func (c *ctlNode) deliver(b *trajBuffer, g *rgroup, retry bool) {
	i := slices.Index(b.groups, g)
	if b != c.buf || i < 0 {
		return
	}
	if err := b.err(); err != nil {
		c.w.record(retry, "ctl: delivery of %s waits: %v%s", g.id, err, retryNote(retry))
		c.after(bufferRetry, "", func() { c.deliver(b, g, true) })
		return
	}
	b.groups = slices.Delete(b.groups, i, i+1)
	c.judge(g)
	c.maybeRedeliver(g)
}

// retryNote marks repeated attempts (routine: traces leave them out).
func retryNote(retry bool) string {
	if retry {
		return " (retrying)"
	}
	return ""
}

// loseBuffer: the server holding the (unreplicated) buffer died. The
// groups in it are gone; the ledger still has them admitted and
// unsettled, so whichever term comes next requeues them.
func (c *ctlNode) loseBuffer(f *fault) {
	b := c.buf
	c.buffersLost++
	b.lostBy = append(b.lostBy, f)
	if b.lost {
		return
	}
	b.lost, b.lostAt = true, c.w.now()
	for _, g := range b.groups {
		c.w.logf("ctl: %s lost with the buffer; the ledger has it unsettled", g.id)
	}
	c.lostGroups += len(b.groups)
	b.groups = nil
}
