package sim

import (
	"fmt"
	"math/rand"
	"slices"
	"time"

	"github.com/asyncrl/asyncrl/actors/rollout/outcome"
	"github.com/asyncrl/asyncrl/messages"
)

// The failover world's rollout groups step the rollout actor's outcome
// core (actors/rollout/outcome), as the actor's runGroup/storeGroup/settle
// do: a group is n episodes, each its own timer, ending finished or
// aborted; the last one decides — Packing (packed at once, never failing
// here), then Storing in the term's trajectory buffer, retried on the
// core's schedule (every StoreRetryWait(DefaultStoreRetry), until
// DefaultStoreFor), then Ready (the group goes to the holder's trainer)
// or Aborted, whose EpisodeAborted reports go to the term's controller,
// which requeues the prompt on the first and ignores the rest.
//
// Why an episode aborts here, as the real rollout's do:
//   - its engine is gone: an engine-swap replaces a live node's engine, or
//     its engine dies before the node restarts without one; the turns in
//     flight fail (this world's rollouts route only to their own engine,
//     so no other engine takes the retries) — "turn … failed";
//   - the node follows a newer term: the rollout host stops the old
//     term's actors (cluster/rollouthost follow → Actor.Stop), so their
//     running episodes end "shutdown" and a store waiting on the buffer is
//     cut short with its last error (storeGroup returns on the actor's
//     context) — their reports go to the old term's controller, heard only
//     if its pipeline still runs (a zombie's); otherwise the next claim's
//     RequeueStale requeues them from the ledger.
//
// A SIGKILL (rollout-node-kill, the restart of an engine-swap) sends
// nothing: the term's AbortGroups covers the groups its last status listed.
//
// The store's give-up at StoreFor is modelled and, with production's
// numbers, not reached: a buffer that fails stores fails its probes too
// (stream-outage), and the term's watch steps the term down at
// UnhealthyAfter (30 s), long before 60 s; the next term's announcement
// then cuts the stores (counted as cut, not given up).

// rolloutSalt seeds the rollout model's own stream: the group size and
// the episodes' lengths, so the run's stream draws what it drew before.
const rolloutSalt = 0x31_0a7c_0e5e

// foRollout is the rollout model's stream and its counts.
type foRollout struct {
	rng *rand.Rand
	// n is the episodes of every group (2–3, as the default world draws
	// its group size for most seeds).
	n int
	RolloutFates
}

func newFoRollout(seed int64) foRollout {
	rng := rand.New(rand.NewSource(seed ^ rolloutSalt))
	return foRollout{rng: rng, n: 2 + rng.Intn(2)}
}

// Abort reasons, as the real rollout actor words them.
const (
	reasonShutdown = "rollout: episode aborted: shutdown"
	errNoLeader    = "no leader (electing)"
)

// runEpisodes starts group g's episodes: the last ends at d (the group's
// length, drawn from the run's stream as the one timer of the group
// before this model was), the others before it. The last is armed first,
// so every other timer keeps its order.
func (r *rnode) runEpisodes(g *pgroup, d time.Duration) {
	w := r.w
	inc, n := r.inc, w.ro.n
	g.fate, g.eps = outcome.New(n), make([]bool, n)
	w.after(d, "", func() { r.episodeEnded(g, n-1, "", inc) })
	for i := range n - 1 {
		w.after(d/2+time.Duration(w.ro.rng.Int63n(int64(d/2))), "", func() { r.episodeEnded(g, i, "", inc) })
	}
}

// episodeEnded steps the outcome core with episode i's end (reason ""
// finished) and carries out what it decides.
func (r *rnode) episodeEnded(g *pgroup, i int, reason string, inc int) {
	w := r.w
	if !r.alive || r.inc != inc || g.eps[i] || g.fate.Stage() != outcome.Running {
		return
	}
	g.eps[i] = true
	if reason != "" {
		w.ro.EpisodesAborted++
		w.logf("%s: episode %d of %s aborted: %s", r.name, i, g.id, reason)
	}
	st, err := episodeEnded(g.fate, i, reason)
	if err != nil {
		w.fail(InvProtocol, "rollout outcome of %s: %v", g.id, err)
		return
	}
	switch st {
	case outcome.Storing:
		w.logf("%s: finished %s", r.name, g.id)
		g.storeBegan = w.clock
		r.store(g, inc)
	case outcome.Aborted:
		r.groupAborted(g)
	}
}

// store tries to store g in the term's trajectory buffer: it fails while
// the buffer has no leader (stream-outage), and is tried again on the
// outcome core's schedule until it gives up. Meanwhile g keeps its slot on
// the node: the real actor's stores wait apart from its episodes, but
// this world's controller has no in-flight bound (W) and the slots stand
// in for it (a real term's groups stuck in their stores hold the
// controller's capacity until stored or aborted).
func (r *rnode) store(g *pgroup, inc int) {
	w := r.w
	if !r.alive || r.inc != inc || g.fate.Stage() != outcome.Storing {
		return
	}
	if w.outage == 0 {
		if g.storeFails > 0 {
			w.logf("%s: stored %s after %d failed tries", r.name, g.id, g.storeFails)
		}
		r.stored(g, "")
		return
	}
	if g.storeFails++; g.storeFails == 1 {
		w.ro.StoresRetried++
	}
	if outcome.StoreGivesUp(w.t0.Add(g.storeBegan), w.now(), outcome.DefaultStoreFor) {
		w.ro.StoresGivenUp++
		w.logf("%s: store of %s gave up after %v", r.name, g.id, outcome.DefaultStoreFor)
		r.stored(g, errNoLeader)
		return
	}
	w.record(g.storeFails > 1, "%s: store of %s failed: %s%s", r.name, g.id, errNoLeader, retryNote(g.storeFails > 1))
	w.after(outcome.StoreRetryWait(outcome.DefaultStoreRetry), "", func() { r.store(g, inc) })
}

// stored steps the store's answer (errText "" stored): Ready — the node
// no longer holds the group and it goes to the holder's trainer — or
// Aborted (the store gave up, or was cut short).
func (r *rnode) stored(g *pgroup, errText string) {
	w := r.w
	st, err := g.fate.Stored(errText)
	if err != nil {
		w.fail(InvProtocol, "rollout outcome of %s: %v", g.id, err)
		return
	}
	if st == outcome.Aborted {
		r.groupAborted(g)
		return
	}
	r.running = slices.DeleteFunc(r.running, func(x *pgroup) bool { return x == g })
	p := g.pipe
	r.send(w.jitter(msec, 30*msec), true, func() { p.deliver(g) })
}

// groupAborted sends an aborted group's EpisodeAborted reports, as the
// core lists them, to the controller of the group's term; the node no
// longer holds the group (its next status leaves it out).
func (r *rnode) groupAborted(g *pgroup) {
	w := r.w
	r.running = slices.DeleteFunc(r.running, func(x *pgroup) bool { return x == g })
	aborts := g.fate.Aborts()
	w.ro.GroupsAborted++
	if g.fate.Unstored() {
		// As the actor's settle: nobody would ever judge the group, and
		// the controller would hold its slot for good (issue 20).
		w.logf("%s: %s not stored (%s): reported aborted to term %d", r.name, g.id, aborts[0].Reason, g.token)
	} else {
		w.logf("%s: %s aborted (%s): %d reports to term %d", r.name, g.id, aborts[0].Reason, len(aborts), g.token)
	}
	p := g.pipe
	r.send(w.jitter(msec, 30*msec), true, func() { p.reportsAborted(g, len(aborts), aborts[0].Reason) })
}

// stopTerm: the node follows a newer term, so the rollout host stops the
// actors of the one it served: their running episodes end "shutdown" and
// their waiting stores are cut short with their last error.
func (r *rnode) stopTerm(old uint64) {
	for _, g := range slices.Clone(r.running) {
		if g.token > old {
			continue
		}
		switch g.fate.Stage() {
		case outcome.Running:
			r.abortEpisodes(g, reasonShutdown)
		case outcome.Storing:
			r.w.ro.StoresCut++
			r.w.logf("%s: store of %s cut short: its actor stops", r.name, g.id)
			r.stored(g, errNoLeader)
		}
	}
}

// engineGone: the node's engine died or was replaced; the episodes in
// flight on it fail their turns.
func (r *rnode) engineGone(why string) {
	e := r.engine()
	for _, g := range slices.Clone(r.running) {
		if g.fate.Stage() == outcome.Running {
			r.abortEpisodes(g, fmt.Sprintf("rollout: episode aborted: turn of %s failed: engine %s %s", g.id, e, why))
		}
	}
}

// abortEpisodes ends g's running episodes aborted for reason.
func (r *rnode) abortEpisodes(g *pgroup, reason string) {
	for i := range g.eps {
		if !g.eps[i] {
			r.episodeEnded(g, i, reason, r.inc)
		}
	}
}

// reportsAborted: a group's EpisodeAborted reports reach the term's
// controller. The real controller core requeues the group on the first
// report and ignores the rest (Abort of a group it no longer holds), and
// so ignores them all for a group already requeued (swept as a dead
// node's) or settled. A stopped or replaced pipeline hears nothing.
func (p *pipe) reportsAborted(g *pgroup, reports int, reason string) {
	if p.stopped || p.node.pipe != p || g.state != "running" {
		return
	}
	p.node.w.ro.RequeuedOnReports++
	g.onReports = true
	p.requeue(g, fmt.Sprintf("%d reports from %s: %s", reports, g.rollout.name, reason))
}

// requeue: the term's controller requeues g; its mirror records the
// requeue after the group's consumed event. A group is requeued at most
// once (dead-node-groups-requeued-once): on its rollout's reports or as a
// dead node's, never both.
func (p *pipe) requeue(g *pgroup, why string) {
	w := p.node.w
	if g.requeued++; g.requeued > 1 {
		w.fail(InvDeadNodeRequeue, "group %s requeued twice in term %d (again: %s)", g.id, p.token, why)
		return
	}
	g.state = "aborted"
	p.record(ledgerEvent{pr: w.ledger[g.prompt], token: p.token, state: messages.LedgerRequeued, attempt: g.attempt,
		group: g.id, why: why})
}
