package sim

import (
	"time"

	"github.com/asyncrl/asyncrl/actors/publisher/tracker"
	"github.com/asyncrl/asyncrl/cluster/term"
	"github.com/asyncrl/asyncrl/cluster/weightsync/targets"
	"github.com/asyncrl/asyncrl/messages"
)

// rnode is a rollout node hosting one engine.
type rnode struct {
	w     *fo
	name  string
	alive bool
	inc   int
	slots int
	// swap: how it came back from an engine-swap (failover_extra.go).
	swap int
	// term: the term it serves (from announcements).
	token  uint64
	holder *tnode
	// running groups, and the engine's loaded weights (token, version).
	running []*pgroup
	bootAt  time.Duration
	engTok  uint64
	engVer  int64
	// agent: the engine's weight-sync agent's targets for term engTok.
	agent  targets.State
	linkAt time.Duration // FIFO link to the holder
	// engDown: its engine died and the node is about to restart without
	// one (engine-swap): it takes no group meanwhile.
	engDown bool
}

func (r *rnode) engine() string { return r.engineName() }

func (w *fo) rolloutByEngine(e string) *rnode {
	for _, r := range w.rollouts {
		if r.engine() == e && r.alive {
			return r
		}
	}
	return nil
}

func (r *rnode) boot() {
	w := r.w
	r.alive, r.inc, r.running, r.engTok, r.engVer, r.token, r.holder, r.bootAt, r.engDown = true, r.inc+1, nil, 0, -1, 0, nil, w.clock, false
	w.logf("%s: up (incarnation %d)", r.name, r.inc)
	w.gossip(200*msec, time.Second)
	r.loop(w.jitter(50*msec, 150*msec), 100*msec, r.pull)
	r.loop(statusEvery, statusEvery, func() { r.status(true) })
}

func (r *rnode) loop(first, period time.Duration, fn func()) {
	inc := r.inc
	r.w.afterRoutine(first, func() {
		if !r.alive || r.inc != inc {
			return
		}
		fn()
		r.loop(period, period, fn)
	})
}

func (r *rnode) kill() {
	w := r.w
	var ids []string
	for _, g := range r.running {
		ids = append(ids, g.id)
	}
	w.logf("%s: killed with groups %v in flight", r.name, ids)
	r.alive, r.inc, r.running = false, r.inc+1, nil
	w.gossip(time.Second, 3*time.Second)
	// The routers' health checks find the engine gone.
	w.after(w.jitter(0, 500*msec), "", func() {
		for _, n := range w.trainers {
			if p := n.pipe; p != nil {
				if _, ok := p.router[r.engine()]; ok {
					p.router[r.engine()] = -1
				}
			}
		}
	})
}

// send delivers fn at the holder after d; fifo keeps the link's order.
// The message was sent: it arrives even if this node dies meanwhile.
func (r *rnode) send(d time.Duration, fifo bool, fn func()) {
	w := r.w
	at := w.clock + d
	if fifo {
		at = max(at, r.linkAt)
		r.linkAt = at
	}
	w.after(at-w.clock, "", fn)
}

func (r *rnode) announced(tok uint64, n *tnode) {
	if r.alive && tok > r.token {
		old := r.token
		r.token, r.holder = tok, n
		r.w.logf("%s: serves term token %d of %s", r.name, tok, n.name)
		if old != 0 {
			r.stopTerm(old) // the rollout host stops the old term's actors
		}
	}
}

// pull takes a group from the term's queue when a slot is free and its
// engine is routable in the term (acked the term's version).
func (r *rnode) pull() {
	w := r.w
	n := r.holder
	if n == nil || !n.alive || n.pipe == nil || n.pipe.token != r.token || n.pipe.stopped || n.pipe.stalled || len(r.running) >= r.slots || r.engDown {
		return
	}
	p := n.pipe
	if ok, belowMin := p.routable(r.engine()); !ok && !(belowMin && w.cfg.has(BugFailoverRouterIgnoresMin)) {
		if belowMin {
			w.ro.Gated++
		}
		return
	}
	pr, ok := w.take(p, r)
	if !ok {
		return
	}
	if r.engTok != p.token {
		w.fail(InvRouting, "%s (%s) routed to %s in term %d, which serves term %d's weights", pr.group, r.name, r.engine(), p.token, r.engTok)
		return
	}
	// The engine itself (not the acks the router heard) serves at least
	// the router's minimum.
	if min := p.publisher().tr.RouterMin(); r.engVer-p.base.Version < min {
		w.fail(InvRouting, "%s (%s) routed to %s serving version %d of term %d, below the router's minimum %d", pr.group, r.name, r.engine(),
			r.engVer, p.token, min+p.base.Version)
		return
	}
	g := &pgroup{id: pr.group, prompt: pr.id, attempt: pr.attempt, rollout: r, token: p.token, state: "running", pipe: p}
	p.groups[g.id] = g
	r.running = append(r.running, g)
	w.logf("%s: runs %s for term %d", r.name, g.id, p.token)
	if !n.core.Remote(r.engine()) {
		w.fail(InvRouting, "%s (%s) routed to %s, not a remote engine of term %d", pr.group, r.name, r.engine(), p.token)
		return
	}
	// The controller's consumed event goes to the term's ledger mirror.
	p.record(ledgerEvent{pr: pr, token: p.token, state: messages.LedgerConsumed, attempt: pr.attempt, group: g.id})
	r.status(false)
	// Its episodes, the outcome core deciding its fate (failover_outcome.go).
	r.runEpisodes(g, w.jitter(200*msec, 1200*msec))
}

// status reports the groups this node runs to the holder (messages.
// RolloutStatus); the periodic ones may be lost or duplicated.
func (r *rnode) status(periodic bool) {
	w := r.w
	n := r.holder
	if n == nil {
		return
	}
	var gs []term.GroupRef
	for _, g := range r.running {
		if g.token == r.token {
			gs = append(gs, term.GroupRef{Group: g.id, Prompt: g.prompt})
		}
	}
	in := term.RolloutStatus{Token: r.token, Node: r.name, Groups: gs}
	inc := n.inc
	deliver := func() {
		if n.alive && n.inc == inc {
			n.step(in)
		}
	}
	copies := 1
	if periodic && w.msgActive > 0 {
		switch w.rng.Intn(4) {
		case 0:
			copies = 0
		case 1:
			copies = 2
		}
	}
	for range copies {
		r.send(w.jitter(msec, 30*msec), true, deliver)
	}
}

// loadWeights: the engine loads version of term tok and acks it.
func (r *rnode) loadWeights(n *tnode, tok uint64, ver int64) {
	w := r.w
	if !r.alive || tok < r.engTok {
		return
	}
	inc := r.inc
	w.after(w.jitter(50*msec, 300*msec), "", func() {
		if !r.alive || r.inc != inc || tok < r.engTok {
			return
		}
		if tok > r.engTok {
			// A newer term: its engine host's weight-sync agent starts
			// fresh, holding no version of the term (weightsync's
			// Config.Fresh).
			r.engTok, r.engVer, r.agent = tok, -1, targets.New(tracker.NoVersion)
		}
		// The real agent's rule (cluster/weightsync/targets, as the
		// engine host's weightsync.Agent steps it): a command for a
		// version it serves is acked again; a newer one is dispatched,
		// loaded (never failing here) and acked.
		if _, ok := r.agent.Reack(ver); !ok {
			r.agent.Dispatch(ver)
			if t, ok := r.agent.Next(); ok {
				r.engVer = t
				r.agent.Handled(t, targets.Loaded)
			}
		}
		got := r.engVer
		w.logf("%s: engine %s serves version %d of term %d", r.name, r.engine(), got, tok)
		e := r.engine()
		w.lossy(func() { n.engineAcked(tok, e, got) })
	})
}

// lossy delivers a weights-path message (LoadWeights or its ack): lost,
// duplicated or delayed while a message fault is on.
func (w *fo) lossy(fn func()) {
	d, copies := w.jitter(msec, 30*msec), 1
	if w.msgActive > 0 {
		switch w.rng.Intn(4) {
		case 0:
			copies = 0
		case 1:
			copies = 2
		case 2:
			d += w.jitter(100*msec, 800*msec)
		}
	}
	for range copies {
		w.after(d, "", fn)
	}
}
