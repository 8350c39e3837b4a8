package sim

import (
	"fmt"
	"time"

	"github.com/asyncrl/asyncrl/cluster/lease/contender"
	"github.com/asyncrl/asyncrl/cluster/term"
)

// The trainer lease (issue 31): every trainer node's elector steps the
// real lease core (cluster/lease/contender) as cluster/lease's Elector
// does — Due(now) names the KV call, the call's answer (or its timeout)
// goes back as Acquired, Taken, Renewed, Refused or Failed, Changed names
// the leadership to report to the term core — against foLease, a model
// of the JetStream KV key: one linearizable server, compare-and-set on
// the key's revision, a TTL on the virtual clock. The calls travel as
// messages: a node cut off the lease (lease-cut, zombie) loses them, and
// while message faults are on (lossy) they are lost or delayed like any
// other, so calls time out here that landed there — renewals the core
// resyncs, Creates it takes up — and answers come after the local
// deadline.

// electTiming is the lease timing cluster/agent runs with (the elector's
// defaults for its LeaseTTL); electCallTimeout the elector's default
// CallTimeout.
var electTiming = contender.DefaultTiming(leaseTTL)

const electCallTimeout = leaseTTL / 4 // = electTiming.RenewInterval

// foLease is the trainer lease's KV key: what it holds (Revision: the
// write that put it there), the bucket's last revision, and when the key
// expires unless written again.
type foLease struct {
	found bool
	key   contender.Holding // as stored: Token 0 for an acquiring Create
	// dec is key as a reader decodes it (contender.Decode of its value),
	// kept from the write: the oracle reads the key after every event.
	dec    contender.Holding
	rev    uint64
	expiry time.Duration
	// created: the contender (holder and instance) whose Create landed at
	// each revision — the terms the lease issued, by token.
	created map[uint64]contender.Holding
	// lastCreate is the newest of them: the newest token issued.
	lastCreate uint64
}

// kvErr is how the KV answered a call.
type kvErr int

const (
	kvOK kvErr = iota
	kvExists
	kvMismatch
	kvNotFound
	kvTimeout
	kvNoResponders
)

// live: the key exists at now (written and not expired).
func (l *foLease) live(now time.Duration) bool { return l.found && now < l.expiry }

// write stores h as the key's next revision at now.
func (l *foLease) write(h contender.Holding, now time.Duration) uint64 {
	l.rev++
	h.Revision = l.rev
	dec, err := contender.Decode(contender.Encode(h), l.rev)
	if err != nil {
		panic(fmt.Sprintf("sim: the lease key's value does not decode: %v", err))
	}
	l.found, l.key, l.dec, l.expiry = true, h, dec, now+leaseTTL
	return l.rev
}

// read is the key as a reader decodes it.
func (l *foLease) read(now time.Duration) (contender.Holding, bool) {
	if !l.live(now) {
		return contender.Holding{}, false
	}
	return l.dec, true
}

// holding is the holder and token the key names (decoded), for logs.
func (l *foLease) holding(now time.Duration) (string, uint64) {
	h, ok := l.read(now)
	if !ok {
		return "", 0
	}
	return h.Holder, h.Token
}

// apply is the server's side of a call.
func (l *foLease) apply(op contender.Op, h contender.Holding, at uint64, now time.Duration) (uint64, kvErr) {
	switch {
	case op == contender.OpAcquire && l.live(now):
		return 0, kvExists
	case op == contender.OpAcquire:
		rev := l.write(h, now)
		if l.created == nil {
			l.created = map[uint64]contender.Holding{}
		}
		l.created[rev] = contender.Holding{Holder: h.Holder, Instance: h.Instance, Token: rev, Revision: rev}
		l.lastCreate = rev
		return rev, kvOK
	case !l.live(now):
		return 0, kvNotFound
	case l.key.Revision != at:
		return 0, kvMismatch
	}
	return l.write(h, now), kvOK
}

// self is the contender this incarnation's elector is (a new elector
// after each step-down, as cluster/agent opens one per contention).
func (n *tnode) self() contender.Holding {
	return contender.Holding{Holder: n.name, Instance: n.elInst}
}

// newElector starts a fresh elector (its core, its instance) that first
// contends after d.
func (n *tnode) newElector(d time.Duration) {
	el, err := contender.NewCore(electTiming)
	if err != nil {
		panic(fmt.Sprintf("sim: failover: lease timing: %v", err))
	}
	n.el, n.elGen, n.elSt = el, n.elGen+1, contender.Status{}
	n.elInst = fmt.Sprintf("%s#%d.%d", n.name, n.inc, n.elGen)
	n.electAt(d)
}

// electAt runs the elector's loop once after d, if this elector lives.
func (n *tnode) electAt(d time.Duration) {
	gen := n.elGen
	inc := n.inc
	n.w.afterRoutine(max(d, msec), func() {
		if n.alive && n.inc == inc && n.elGen == gen {
			n.electTick()
		}
	})
}

// electTick is one pass of the elector's loop (Elector.Tick): the call
// the core wants, its answer, the change it names.
func (n *tnode) electTick() {
	w := n.w
	now := w.now()
	if n.stopping && !n.el.Status(now).Leader {
		return // stopping: it contends no more
	}
	op := n.el.Due(now)
	if op == contender.OpNone {
		n.electReport()
		return
	}
	st := n.el.Status(now)
	gen := n.elGen
	n.kvCall(op, st, func(rev uint64, e kvErr, key contender.Holding, found bool) {
		if n.elGen != gen {
			return // that elector is gone (its term stepped down)
		}
		n.electOutcome(op, st, rev, e, key, found)
		n.electReport()
	})
}

// electOutcome reports a call's answer to the core, as the Elector does.
func (n *tnode) electOutcome(op contender.Op, st contender.Status, rev uint64, e kvErr, key contender.Holding, found bool) {
	w := n.w
	switch {
	case e == kvOK && op == contender.OpAcquire:
		n.el.Acquired(rev)
	case e == kvOK:
		n.el.Renewed(rev)
	case e == kvExists:
		self := n.self()
		if w.cfg.has(BugElectorTakesAnyCreate) {
			self = contender.Holding{Holder: key.Holder, Instance: key.Instance} // planted: whoever's the key is
		}
		if w.cfg.has(BugElectorTakesEarlierLifesCreate) && key.Holder == self.Holder {
			self.Instance = key.Instance // planted: any instance of this node's name
		}
		if n.el.Taken(key, found, self) == contender.RefusalLanded {
			w.logf("lease: %s's Create landed after its call timed out (revision %d): confirming it", n.name, key.Revision)
		}
	case e == kvMismatch || e == kvNotFound:
		v := n.el.Refused(key, found, n.name)
		w.logf("lease: %s's renewal at revision %d refused: %s (the key: %v %+v)", n.name, st.Revision, v, found, key)
	default:
		n.el.Failed()
	}
}

// electReport hands a change of leadership to the term core (OnChange)
// and sleeps until the core's next op.
func (n *tnode) electReport() {
	w := n.w
	now := w.now()
	st, changed := n.el.Changed(now)
	n.elSt = st
	if changed {
		if st.Leader {
			w.logf("lease: %s acquired token %d", n.name, st.Token)
		} else {
			w.logf("lease: %s lost token %d", n.name, st.Token)
		}
		n.notice(term.LeaseChanged{Leader: st.Leader, Token: st.Token})
	}
	n.electAt(n.el.NextAt().Sub(now))
}

// kvCall makes op's call for status st and answers done once: with the
// server's answer if it comes back within the call timeout, else with
// kvTimeout (the write may still land), or at once with kvNoResponders. A write refused because of the
// key's state is followed by a read of the key (bounded as the Elector
// bounds it), whose result goes with the answer.
func (n *tnode) kvCall(op contender.Op, st contender.Status, done func(uint64, kvErr, contender.Holding, bool)) {
	w := n.w
	h := n.self()
	if op == contender.OpRenew {
		h.Token = st.Token
	}
	answered := false
	n.later(max(0, contender.CallBudget(op, st, w.now(), electCallTimeout)), "", func() {
		if !answered {
			answered = true
			done(0, kvTimeout, contender.Holding{}, false)
		}
	})
	if n.leaseCut > 0 && w.rng.Intn(2) == 0 {
		// Cut off, a call fails at once as often as it hangs: a client
		// whose own connection is down gets no responders, not a timeout.
		n.later(w.jitter(msec, 10*msec), "", func() {
			if !answered {
				answered = true
				done(0, kvNoResponders, contender.Holding{}, false)
			}
		})
		return
	}
	n.kvSend(func() {
		rev, e := w.lease.apply(op, h, st.Revision, w.clock)
		if e == kvOK {
			w.logf("lease: %s wrote revision %d (%s)", n.name, rev, op)
		}
		n.kvAnswer(func() {
			if answered {
				return
			}
			answered = true
			if e != kvExists && e != kvMismatch {
				done(rev, e, contender.Holding{}, false)
				return
			}
			end := contender.CallBudget(op, st, w.now(), electCallTimeout)
			if e == kvExists || end > 0 {
				n.kvRead(end, func(key contender.Holding, found bool) { done(rev, e, key, found) })
			} else {
				done(rev, e, contender.Holding{}, false) // past the local deadline: no read
			}
		})
	})
}

// kvRead reads the key, giving up (no key) after end.
func (n *tnode) kvRead(end time.Duration, done func(contender.Holding, bool)) {
	w := n.w
	answered := false
	n.later(end, "", func() {
		if !answered {
			answered = true
			done(contender.Holding{}, false)
		}
	})
	n.kvSend(func() {
		key, found := w.lease.read(w.clock)
		n.kvAnswer(func() {
			if !answered {
				answered = true
				done(key, found)
			}
		})
	})
}

// kvSend carries one message from the node to the KV: lost while the
// node is cut off the lease, and lost or late while message faults are
// on. Once sent it arrives even if the node dies meanwhile.
func (n *tnode) kvSend(fn func()) {
	if d, ok := n.kvDelay(); ok {
		n.w.after(d, "", fn)
	}
}

// kvAnswer carries the KV's answer back to this incarnation of the node,
// lost and late as kvSend's messages are.
func (n *tnode) kvAnswer(fn func()) {
	if d, ok := n.kvDelay(); ok {
		n.later(d, "", fn)
	}
}

// kvDelay is how long a message between the node and the KV takes, or
// false when it is lost.
func (n *tnode) kvDelay() (time.Duration, bool) {
	w := n.w
	if n.leaseCut > 0 {
		return 0, false
	}
	d := w.jitter(msec, 10*msec)
	if w.msgActive > 0 {
		switch w.rng.Intn(4) {
		case 0:
			return 0, false
		case 1:
			d += w.jitter(100*msec, 800*msec)
		}
	}
	return d, true
}

// resign gives the lease up as the agent does when its term steps down:
// the elector's Run ends and resigns (a delete at the held revision, lost
// like any call while cut off), and the next contention opens a fresh
// elector after the wait the core's StepDown named (longer after failed
// terms in a row: term.Config.Recontend).
func (n *tnode) resign(wait time.Duration) {
	w := n.w
	now := w.now()
	if rev, ok := n.el.Resignable(now); ok { // held, or its landed Create being confirmed
		n.el.Resigned(now)
		n.kvSend(func() {
			if l := &w.lease; l.live(w.clock) && l.key.Revision == rev {
				l.found = false
				l.rev++
				w.logf("lease: %s resigned (revision %d deleted)", n.name, rev)
			}
		})
	}
	n.newElector(wait)
}

// checkLease is the lease's safety: a contender whose core told it that
// it leads, until its local deadline, is the key's holder with that
// token — its own instance's key (contender.Holding.Instance), of a term
// its own instance's Create began (the lease's created record) — and the
// key does not expire before that deadline.
func (w *fo) checkLease(n *tnode) {
	w.checks++
	st := n.elSt
	if !st.Leader || !w.now().Before(st.Until) {
		return
	}
	l := &w.lease
	key, ok := l.read(w.clock)
	switch {
	case !ok || key.Holder != n.name || key.Token != st.Token:
		w.fail(InvFencing, "%s's lease core says it leads with token %d until %v, but the key holds %v %+v",
			n.name, st.Token, st.Until.Sub(w.t0), ok, key)
	case key.Instance != n.elInst || l.created[st.Token].Instance != n.elInst:
		w.fail(InvFencing, "%s's lease core (instance %s) says it leads with token %d, but the key was written by instance %s and the term's Create by instance %q",
			n.name, n.elInst, st.Token, key.Instance, l.created[st.Token].Instance)
	case w.t0.Add(l.expiry).Before(st.Until):
		w.fail(InvFencing, "%s's lease core says it leads until %v, past the key's expiry %v", n.name, st.Until.Sub(w.t0), l.expiry)
	}
}
