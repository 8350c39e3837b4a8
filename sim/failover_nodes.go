package sim

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/asyncrl/asyncrl/cluster/lease/contender"
	"github.com/asyncrl/asyncrl/cluster/term"
	"github.com/asyncrl/asyncrl/cluster/termwatch"
)

// tnode is a trainer node: its term core, its lease elector and, while it
// runs a term, the term's pipeline. The shell answers every effect.
type tnode struct {
	w     *fo
	name  string
	alive bool
	inc   int // incarnation: timers of an earlier one do nothing
	core  *term.Core

	// The lease elector (failover_elect.go): its core, which elector of
	// this incarnation it is (one per contention), and the status it last
	// reported.
	el     *contender.Core
	elGen  int
	elInst string // the elector's instance (self)
	elSt   contender.Status
	// noticeAt orders the elector's notices; slowNotice delays them (the
	// zombie fault); leaseCut/storeCut count partitions from the lease KV
	// and the progress store.
	noticeAt, gossipAt time.Duration
	slowNotice         time.Duration
	leaseCut, storeCut int
	// stopping: a clean stop is under way (node-stop): the node contends
	// no more and exits once its core gave the lease up.
	stopping bool
	// lastNotice is the elector's newest notice (a later one may coalesce
	// an undelivered loss with it).
	lastNotice *pendingNotice

	pipe *pipe
	// marks: this node's trained marks not written yet; marksWait: what
	// waits for them (a sweep, as the agent's waitMarks); claimed: the
	// claim whose requeue has not run yet (checkClaim judges it then).
	marks     int
	marksWait []func()
	claimed   *term.ProgressClaimed
	// blocked: the shell waits in a sweep for the marks, as the agent's
	// loop does; inputs wait in inbox meanwhile, and the core is not
	// ticked.
	blocked bool
	inbox   []term.Input

	// host is this node's rank host (failover_ranks.go); view the
	// membership as gossip last told it.
	host *rankHost
	view []string
}

// pendingNotice is an elector notice on its way to the core.
type pendingNotice struct {
	in            term.LeaseChanged
	done, dropped bool
}

func (n *tnode) boot() {
	w := n.w
	n.alive, n.inc = true, n.inc+1
	n.pipe, n.slowNotice, n.leaseCut, n.storeCut = nil, 0, 0, 0
	n.marks, n.marksWait, n.claimed, n.blocked, n.inbox = 0, nil, nil, false, nil
	n.stopping, n.lastNotice = false, nil
	n.host, n.view = newRankHost(), nil
	c, err := term.New(term.Config{Node: n.name, Run: runID, Steps: int64(w.cfg.Steps), Checkpoints: true, Recontend: resignBackoff,
		Watch: termwatch.Config{StallAfter: max(3*w.cfg.ProgressBound, giveUpAfter()+5*time.Second), UnhealthyAfter: termwatch.DefaultConfig().UnhealthyAfter,
			StartAfter: w.cfg.ProgressBound / 2},
		Plant: w.plant()})
	if err != nil {
		panic(fmt.Sprintf("sim: failover: term config: %v", err))
	}
	n.core = c
	w.logf("%s: up (incarnation %d)", n.name, n.inc)
	w.gossip(200*msec, time.Second)
	n.newElector(w.jitter(0, electTiming.RenewInterval))
	n.loop(w.jitter(0, tickEvery), tickEvery, func() {
		if !n.blocked {
			n.core.Tick(w.now())
			n.drain(nil)
		}
	})
	n.loop(observeEvery, observeEvery, func() { n.step(term.ProgressObserved{Progress: w.store.prog}) })
	n.probeLoop()
	n.rankWatch()
}

// loop runs fn every period while this incarnation lives.
func (n *tnode) loop(first, period time.Duration, fn func()) {
	inc := n.inc
	n.w.afterRoutine(first, func() {
		if !n.alive || n.inc != inc {
			return
		}
		fn()
		n.loop(period, period, fn)
	})
}

// later runs fn after d if this incarnation still lives.
func (n *tnode) later(d time.Duration, label string, fn func()) {
	inc := n.inc
	n.w.after(d, label, func() {
		if n.alive && n.inc == inc {
			fn()
		}
	})
}

func (n *tnode) kill() {
	w := n.w
	w.logf("%s: killed (lease %v token %d, %s)", n.name, n.elSt.Leader, n.elSt.Token, n.core)
	n.alive, n.inc = false, n.inc+1
	if n.pipe != nil {
		n.pipe.stopped = true
	}
	n.pipe = nil
	w.gossip(time.Second, 3*time.Second)
}

// notice hands the elector's change to the core, in order, late when the
// zombie fault is on.
//
// Late notices may coalesce: a watcher that reports only the latest state
// drops a loss not yet delivered when the re-acquisition follows it, so
// the core sees a new token without a loss in between; and a status may
// come twice.
func (n *tnode) notice(in term.LeaseChanged) {
	w := n.w
	at := max(w.clock+n.slowNotice, n.noticeAt)
	n.noticeAt = at
	if last := n.lastNotice; in.Leader && last != nil && !last.in.Leader && !last.done && w.x.chance(w.x.coalesce) {
		last.dropped = true
		w.logf("%s: the elector's loss notice coalesces with the re-acquisition (token %d)", n.name, in.Token)
	}
	pn := &pendingNotice{in: in}
	n.lastNotice = pn
	dup := w.x.chance(w.x.dupNotice)
	n.later(at-w.clock, "", func() {
		if pn.done = true; pn.dropped {
			return
		}
		n.step(in)
		if dup {
			n.step(in)
		}
	})
}

// step feeds one input to the core and applies its Ready (once the
// shell is not blocked in a sweep).
func (n *tnode) step(in term.Input) {
	if n.blocked {
		n.inbox = append(n.inbox, in)
		return
	}
	n.core.Step(n.w.now(), in)
	n.drain(in)
}

// unblock: the sweep is done; the inputs that waited are stepped, in
// order, until one blocks the shell again.
func (n *tnode) unblock() {
	n.blocked = false
	for len(n.inbox) > 0 && !n.blocked && n.w.violation == nil {
		in := n.inbox[0]
		n.inbox = n.inbox[1:]
		n.core.Step(n.w.now(), in)
		n.drain(in)
	}
}

func (n *tnode) drain(in term.Input) {
	w := n.w
	r := n.core.Ready()
	if r.Empty() {
		return
	}
	for _, e := range r.Events {
		w.countEvent(e)
		if e.Kind != term.Ignored {
			w.logf("%s: %s", n.name, e)
		} else {
			w.record(true, "%s: %s", n.name, e)
		}
	}
	tok, _ := n.core.Holding()
	w.checkReady(n, in, r)
	n.applyAll(r.Effects, tok)
	n.core.Advance()
	switch v := in.(type) {
	case term.MembersChanged:
		w.checkDeadNodes(n, v)
	case term.ProgressClaimed:
		// Judged once the claim's requeue is done (it waits for the
		// node's trained marks), or now when it asked for none. A claim
		// the core ignored (a repeated answer: failover_extra.go) applied
		// nothing: the claim it repeats was judged at its own requeue —
		// a zombie's consumed event that reached the ledger after that
		// requeue is no prompt the claim left in flight.
		switch {
		case slices.ContainsFunc(r.Events, isIgnored):
		case !slices.ContainsFunc(r.Effects, isRequeue):
			w.checkClaim(n, v)
		default:
			n.claimed = &v
		}
	}
}

// apply carries out one effect.
func (n *tnode) apply(e term.Effect, tok uint64) {
	if n.applyDurable(e, tok) {
		return
	}
	w := n.w
	switch v := e.(type) {
	case term.StartPipeline:
		n.startPipeline(v)
	case term.StopPipeline:
		if p := n.pipe; p != nil && p.token == v.Token {
			p.stopped = true
			w.logf("%s: pipeline of token %d stopped", n.name, v.Token)
		}
	case term.Announce:
		for _, r := range w.rollouts {
			r.send(w.jitter(msec, 30*msec), true, func() { r.announced(v.Token, n) })
		}
	case term.AbortGroups:
		n.abort(v)
	case term.AddEngines:
		n.addEngines(v)
	case term.RemoveEngines:
		if p := n.pipe; p != nil {
			for _, e := range v.Names {
				delete(p.router, e)
				delete(p.regAt, e)
				p.removedAt(e)
				p.engineLeft(e)
			}
		}
	case term.SendLoadWeights:
		n.sendLoadWeights(v, tok)
	case term.StepDown:
		n.resign(v.Wait)
		if n.stopping {
			n.later(0, "", func() {
				w.logf("%s: stopped", n.name)
				n.kill()
			})
		}
	case term.Done, term.DeleteTermBucket, term.Prune:
	}
}

// applyDurable carries out the effects on the progress store and the
// ledger; false for any other effect.
func (n *tnode) applyDurable(e term.Effect, tok uint64) bool {
	w := n.w
	switch v := e.(type) {
	case term.ClaimProgress:
		n.storeOp(fmt.Sprintf("claim token %d", v.Token), func() { n.claim(v.Token) }, func() { n.step(term.Failed{Token: v.Token, Err: "store unreachable"}) })
	case term.SaveProgress:
		p := v.Progress
		n.storeOp(fmt.Sprintf("save step %d token %d", p.Step, p.Token), func() { n.save(p) },
			func() { n.step(term.SaveFailed{Token: p.Token, Step: p.Step, Err: "store unreachable"}) })
	case term.MarkTrained:
		w.markTrained(n, v, tok)
		n.marksHealth(tok)
	case term.RequeueNode:
		count := w.sweep(n.name, "requeue node "+v.Node, func(e *foEntry) bool { return e.ent.Sender == v.Node },
			func(uint64) bool { return false })
		n.claimSwept()
		n.later(w.jitter(msec, 20*msec), "", func() { n.step(term.NodeRequeued{Token: tok, Node: v.Node, Count: count}) })
	case term.RequeueStale:
		count, ok := w.sweepStale(n.name, v.Token)
		if !ok {
			return true
		}
		n.claimSwept()
		n.later(w.jitter(msec, 20*msec), "", func() { n.step(term.StaleRequeued{Token: tok, Count: count}) })
	case term.Finish:
		w.logf("%s: run finished (token %d)", n.name, v.Token)
		w.sweep(n.name, "run finished", func(*foEntry) bool { return true }, func(uint64) bool { return false })
	default:
		return false
	}
	return true
}

// storeOp runs op at the store after a delay, retrying while this node is
// cut off from it; after storeBudget it gives up with failed.
func (n *tnode) storeOp(what string, op, failed func()) {
	n.remoteOp(what, "store unreachable", func() bool { return n.storeCut > 0 }, op, failed)
}

// remoteOp runs op after a delay, retrying every storeRetry while
// blocked; once storeBudget has passed since the call it logs what failed
// (why) and gives up with failed.
func (n *tnode) remoteOp(what, why string, blocked func() bool, op, failed func()) {
	w := n.w
	start := w.clock
	var try func()
	try = func() {
		if blocked() {
			if w.clock-start >= storeBudget {
				w.logf("%s: %s failed: %s", n.name, what, why)
				failed()
				return
			}
			n.later(storeRetry, "", try)
			return
		}
		op()
	}
	n.later(w.jitter(5*msec, 150*msec), "", try)
}

// claim is ledger.Progress+Claim at the store, fenced by the token.
func (n *tnode) claim(tok uint64) {
	w := n.w
	s := &w.store
	if err := contender.CheckFence(s.claimed, tok); err != nil {
		w.logf("store: claim of token %d by %s refused (claimed by token %d)", tok, n.name, s.claimed)
		n.later(w.jitter(msec, 20*msec), "", func() { n.step(term.Failed{Token: tok, Err: "fenced"}) })
		return
	}
	prev := s.prog
	s.claimed = tok
	s.prog.Token, s.prog.Holder = tok, n.name
	cl := w.claimedProgress(s.prog)
	w.logf("store: %s claimed token %d at step %d (previous holder %q token %d)", n.name, tok, cl.Step, prev.Holder, prev.Token)
	n.claimAnswered(term.ProgressClaimed{Token: tok, Prev: prev, Claimed: cl})
}

// save is a fenced progress write.
func (n *tnode) save(p term.Progress) {
	w := n.w
	s := &w.store
	if p.Token != s.claimed {
		w.logf("store: save of step %d with token %d refused (claimed by token %d)", p.Step, p.Token, s.claimed)
		n.later(w.jitter(msec, 20*msec), "", func() {
			n.step(term.SaveFailed{Token: p.Token, Step: p.Step, Fenced: true, Err: "fenced"})
		})
		return
	}
	w.durable(n, p)
	n.later(w.jitter(msec, 20*msec), "", func() { n.step(term.ProgressSaved{Token: p.Token, Step: p.Step}) })
	if w.rng.Intn(20) == 0 { // a duplicated answer
		n.later(w.jitter(20*msec, 200*msec), "", func() { n.step(term.ProgressSaved{Token: p.Token, Step: p.Step}) })
	}
}

func (n *tnode) startPipeline(v term.StartPipeline) {
	w := n.w
	p := &pipe{node: n, token: v.Token, base: v.From, steps: v.Steps, groups: map[string]*pgroup{},
		router: map[string]int64{}, regAt: map[string]time.Duration{}, aborted: map[string]int{}}
	p.targets = []target{{w.clock, v.From.Version}}
	n.fenceOwn(v.Token)
	if n.pipe != nil {
		n.pipe.stopped = true
	}
	n.pipe = p
	w.logf("%s: pipeline %s from step %d version %d for %d steps", n.name, v.Term, v.From.Step, v.From.Version, v.Steps)
	if p.stalled = w.startStalls > 0; p.stalled {
		// How far it got (the second stream's draw): nowhere, its
		// checkpoint restored, or its router listening — the core's stall
		// reason names the last phase, the router and the engines serving.
		hang := w.x.rng.Intn(3)
		w.logf("%s: the start of %s hangs (%s)", n.name, v.Term, []string{"at once", "after its checkpoint", "after its router listens"}[hang])
		if hang == 0 {
			return
		}
		n.later(w.jitter(5*msec, 50*msec), "", func() {
			n.step(term.StartPhase{Token: v.Token, Phase: "checkpoint restored"})
			if hang == 2 {
				p.routerUp = true
				n.step(term.RouterListening{Token: v.Token, URL: "http://" + n.name + "/router"})
			}
		})
		return
	}
	n.later(w.jitter(5*msec, 50*msec), "", func() {
		n.step(term.StartPhase{Token: v.Token, Phase: "checkpoint restored"})
		n.step(term.RouterListening{Token: v.Token, URL: "http://" + n.name + "/router"})
		n.step(term.PipelineStarted{Token: v.Token})
		n.startRanks(p)
	})
}

// addEngines registers engines with the router (not routable until they
// ack this term's version) and the publisher, whose catch-up command
// targets them (failover_publish.go).
func (n *tnode) addEngines(v term.AddEngines) {
	w, p := n.w, n.pipe
	if p == nil {
		return
	}
	for _, e := range slices.Sorted(maps.Keys(v.Engines)) {
		p.router[e], p.regAt[e] = -1, w.clock
		p.engineJoined(e)
	}
}

func (n *tnode) sendLoadWeights(v term.SendLoadWeights, tok uint64) {
	w := n.w
	r := w.rolloutByEngine(v.Engine)
	if r == nil || n.pipe != nil && n.pipe.stalled && !n.pipe.routerUp {
		return
	}
	w.logf("%s: LoadWeights %s version %d token %d", n.name, v.Engine, v.Version, tok)
	w.lossy(func() { r.loadWeights(n, tok, v.Version) })
}

// abort: the controller requeues the groups a dead rollout node held
// (fenced: a deposed term's ledger writes are refused).
func (n *tnode) abort(v term.AbortGroups) {
	w, p := n.w, n.pipe
	for _, g := range v.Groups {
		if p == nil {
			continue
		}
		if p.aborted[g.Group]++; p.aborted[g.Group] > 1 {
			w.fail(InvDeadNodeRequeue, "group %s of dead node %s reported aborted twice in term %d", g.Group, v.Node, p.token)
			return
		}
		pg := p.groups[g.Group]
		if pg != nil && pg.onReports {
			// Requeued already on its rollout's own reports, which its
			// node's last status did not yet leave out: the controller
			// core ignores the abort of a group it no longer holds.
			w.ro.SweptAfterReports++
			if w.cfg.has(BugCtlRequeuesSweptGroup) {
				p.requeue(pg, "dead node "+v.Node+" (planted bug)")
			}
			continue
		}
		if pg == nil || pg.state != "running" {
			continue // finished before it died: the trainer has it
		}
		p.requeue(pg, "dead node "+v.Node)
	}
}

// applyAll applies a Ready's effects in order. A sweep (the requeues, the
// run's finish) first waits for this node's trained marks, as the
// agent's waitMarks does — holding up the effects after it, as the
// agent's loop is held.
func (n *tnode) applyAll(effects []term.Effect, tok uint64) {
	w := n.w
	for i, e := range effects {
		if w.violation != nil {
			return
		}
		if _, fin := e.(term.Finish); (isRequeue(e) || fin) && n.marks > 0 {
			rest, inc := effects[i:], n.inc
			n.blocked = true
			n.afterMarks(func() {
				if n.alive && n.inc == inc {
					n.blocked = false
					n.applyAll(rest, tok)
					if !n.blocked {
						n.unblock()
					}
				}
			})
			return
		}
		n.apply(e, tok)
	}
}

func isIgnored(e term.Event) bool { return e.Kind == term.Ignored }

func isRequeue(e term.Effect) bool {
	switch e.(type) {
	case term.RequeueStale, term.RequeueNode:
		return true
	}
	return false
}

// afterMarks runs fn once this node's trained marks are written (a sweep
// would take their prompts, still unmarked, for prompts in flight).
func (n *tnode) afterMarks(fn func()) {
	if n.marks == 0 {
		fn()
		return
	}
	n.marksWait = append(n.marksWait, fn)
}

// markDone: one trained mark written (or dropped with its node).
func (n *tnode) markDone() {
	if n.marks--; n.marks > 0 {
		return
	}
	wait := n.marksWait
	n.marksWait = nil
	for _, fn := range wait {
		fn()
	}
}

// claimSwept: the claim's requeue ran; judge the claim now.
func (n *tnode) claimSwept() {
	if v := n.claimed; v != nil {
		n.claimed = nil
		n.w.checkClaim(n, *v)
	}
}
