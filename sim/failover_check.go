package sim

import (
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"time"

	"github.com/asyncrl/asyncrl/cluster/term"
)

// checkReady judges a Ready before it is applied: a term whose save the
// store refused as fenced does nothing lease-scoped any more.
func (w *fo) checkReady(n *tnode, in term.Input, r term.Ready) {
	w.checks++
	sf, ok := in.(term.SaveFailed)
	if !ok || !sf.Fenced {
		return
	}
	for _, e := range r.Effects {
		switch e.(type) {
		case term.StopPipeline, term.StepDown:
		default:
			w.fail(InvFencing, "%s: the store refused token %d's save of step %d (fenced), yet the term asks for %T %+v",
				n.name, sf.Token, sf.Step, e, e)
			return
		}
	}
}

// checkDeadNodes: once the holder has seen a rollout node leave, every
// group the node ran for the term is requeued (reported aborted, once).
func (w *fo) checkDeadNodes(n *tnode, v term.MembersChanged) {
	w.checks++
	p := n.pipe
	tok, _ := n.core.Holding()
	if p == nil || p.stopped || !n.core.Running() || tok != p.token {
		return
	}
	live := map[string]bool{}
	for _, m := range v.Members {
		live[m.Name] = true
	}
	for _, id := range slices.Sorted(maps.Keys(p.groups)) {
		g := p.groups[id]
		if g.state == "running" && !live[g.rollout.name] {
			w.fail(InvDeadNodeRequeue, "%s left with %s in flight and the holder %s (token %d) saw it leave, but %s was not requeued",
				g.rollout.name, g.id, n.name, p.token, g.id)
			return
		}
	}
}

// checkClaim: once a claim was applied, nothing an older term had in
// flight is still in flight — the previous holder's, and those of the
// holders before it when a claimer died between its claim and its
// requeue (a dead holder's prompts are requeued at the takeover, after
// its last durable step was marked).
func (w *fo) checkClaim(n *tnode, v term.ProgressClaimed) {
	w.checks++
	if tok, ok := n.core.Holding(); !ok || tok != v.Token || v.Prev.Holder == "" {
		return
	}
	// The claim marks only the last durable step's prompts: every step
	// before it must have been marked already (issue 37), or a holder that
	// died with those marks unwritten lost them for good.
	for step := int64(1); step < v.Prev.Step; step++ {
		for _, pa := range w.store.history[step] {
			if pr := w.ledger[pa.Prompt]; pr.trainedAt != step {
				w.fail(InvLedger, "%s claimed token %d at durable step %d, but step %d's %s was never marked trained: the claim marks only step %d's prompts",
					n.name, v.Token, v.Prev.Step, step, pa.Group, v.Prev.Step)
				return
			}
		}
	}
	for _, key := range slices.Sorted(maps.Keys(w.entries)) {
		if e := w.entries[key]; e.inFlight() && e.token < v.Token {
			w.fail(InvDeadNodeRequeue, "%s claimed token %d from %s (token %d), but %s of %s (token %d) is still in flight",
				n.name, v.Token, v.Prev.Holder, v.Prev.Token, e.ent.GroupID, e.ent.Sender, e.token)
			return
		}
	}
}

func groupsOf(ps []term.PromptAttempt) []string {
	var s []string
	for _, p := range ps {
		s = append(s, p.Group)
	}
	return s
}

// durable records a save the store accepted: progress never goes back,
// steps come one at a time, and no prompt is in two durable steps.
func (w *fo) durable(n *tnode, p term.Progress) {
	w.checks++
	s := &w.store
	if p.Step < s.prog.Step || p.Step > s.prog.Step+1 {
		w.fail(InvDurableMonotonic, "%s's save of step %d (token %d) lands on durable step %d", n.name, p.Step, p.Token, s.prog.Step)
		return
	}
	for st, ps := range s.history {
		for _, a := range ps {
			for _, b := range p.Prompts {
				if st != p.Step && a.Prompt == b.Prompt {
					w.fail(InvTrainedTwice, "prompt %s durable in step %d (%s) and step %d (%s)", a.Prompt, st, a.Group, p.Step, b.Group)
					return
				}
			}
		}
	}
	s.prog = p
	s.history[p.Step], s.historyBy[p.Step] = p.Prompts, p.Token
	w.lastDurableAt = w.clock
	w.logf("store: step %d version %d durable (token %d, %s) %v", p.Step, p.Version, p.Token, n.name, groupsOf(p.Prompts))
	if p.Step >= int64(w.cfg.Steps) {
		w.finish()
	}
}

// checkAll runs after every event.
func (w *fo) checkAll() {
	w.checks += 3
	held := map[uint64]string{}
	for _, n := range w.trainers {
		if !n.alive {
			continue
		}
		if w.checkHolder(n); w.violation != nil {
			return
		}
		if w.checkLease(n); w.violation != nil {
			return
		}
		if w.checkRanks(n); w.violation != nil {
			return
		}
		if tok, ok := n.core.Holding(); ok {
			if o, dup := held[tok]; dup {
				w.fail(InvFencing, "%s and %s both hold token %d", o, n.name, tok)
				return
			}
			held[tok] = n.name
		}
	}
	w.checkConverge()
	if w.finished {
		return
	}
	if w.clock > foTimeLimit {
		w.fail(InvProgress, "run did not make %d steps durable within %v (durable step %d)", w.cfg.Steps, foTimeLimit, w.store.prog.Step)
		return
	}
	// Progress is owed from the last fault's end, the last durable step,
	// or the end of a publish's retry wait armed during a fault (the
	// rule's backoff, 2 s doubling to 32 s, outlasts ProgressBound; a
	// wait armed with every fault healed is not excused).
	excuse := w.retryQuiet
	if w.cfg.noRetryExcuse {
		excuse = 0
	}
	if since := max(w.quietSince, w.lastDurableAt, excuse); w.active == 0 && w.clock-since > w.cfg.ProgressBound {
		h, tok := w.lease.holding(w.clock)
		w.fail(InvProgress, "no step became durable for %v with every fault healed (durable step %d, lease %s token %d, queued %d)",
			w.clock-since, w.store.prog.Step, h, tok, len(w.queue))
	}
}

// checkConverge: once message faults have been quiet for SyncBound, every
// engine of the term of the latest claim has acked (to its router) the
// version published SyncBound ago.
func (w *fo) checkConverge() {
	if w.msgActive > 0 || w.clock-w.msgQuietSince < w.cfg.SyncBound {
		return
	}
	for _, n := range w.trainers {
		p := n.pipe
		tok, _ := n.core.Holding()
		if !n.alive || p == nil || p.stopped || !n.core.Running() || tok != p.token || p.token != w.store.claimed {
			continue
		}
		cut := w.clock - w.cfg.SyncBound
		want := int64(-1)
		for _, t := range p.targets {
			if t.at <= cut {
				want = t.version
			}
		}
		for _, e := range slices.Sorted(maps.Keys(p.router)) {
			r := w.rolloutByEngine(e)
			if r == nil || p.regAt[e] > cut || r.bootAt > cut {
				continue
			}
			if p.router[e] < want {
				w.fail(InvSync, "engine %s serves version %d of term %d (as acked); version %d was published %v ago", e, p.router[e], p.token, want, w.cfg.SyncBound)
				return
			}
		}
	}
}

// finalChecks: every durable step's prompts are marked trained, by that
// step, and none of them is in flight or queued again.
func (w *fo) finalChecks() {
	w.checks++
	for step := int64(1); step <= w.store.prog.Step; step++ {
		for _, pa := range w.store.history[step] {
			pr := w.ledger[pa.Prompt]
			if pr.trainedAt != step || pr.trainedGroup != pa.Group || w.inFlight(pr) || slices.Contains(w.queue, pr.id) {
				w.fail(InvLedger, "durable step %d trained %s, but the ledger has it trained at step %d (%s), in flight %v, queued %v",
					step, pa.Group, pr.trainedAt, pr.trainedGroup, w.inFlight(pr), slices.Contains(w.queue, pr.id))
				return
			}
		}
	}
}

// foFault is one drawn failover fault.
type foFault struct {
	idx     int
	kind    FaultKind
	at, dur time.Duration
	node    int           // trainer or rollout index
	notice  time.Duration // zombie: how late its elector's notices come
	// elect: how long the ledger's stream elects a leader (a
	// ledger-election; a rollout node's kill when its server led the
	// stream, else 0).
	elect   time.Duration
	enabled bool
	started bool
	ended   bool
	target  *tnode
	inc     int
	swap    int // engine-swap: how the node comes back
}

func (f *foFault) String() string {
	s := fmt.Sprintf("#%d %s at %.3fs for %v", f.idx, f.kind, f.at.Seconds(), f.dur)
	switch f.kind {
	case FaultRolloutKill:
		s += fmt.Sprintf(" on r%d", f.node+1)
	case FaultLeaseCut, FaultStoreCut:
		s += fmt.Sprintf(" on n%d", f.node+1)
	case FaultQuorumLoss, FaultNodeStop:
		s += fmt.Sprintf(" on the holder (else n%d)", f.node+1)
	case FaultMirrorLag:
		s += fmt.Sprintf(", consumed events %v late", f.notice)
	case FaultEngineSwap:
		s += fmt.Sprintf(" on r%d", f.node+1)
	case FaultHolderKill:
		s += " on the holder"
	case FaultZombie:
		s += fmt.Sprintf(" on the holder, notices %v late", f.notice)
	}
	if f.elect > 0 && f.kind == FaultRolloutKill {
		s += fmt.Sprintf(", its server led the ledger (election %v)", f.elect)
	}
	return s
}

var failoverKinds = []FaultKind{FaultHolderKill, FaultHolderKill, FaultZombie, FaultZombie, FaultRolloutKill, FaultRolloutKill,
	FaultLeaseCut, FaultStoreCut, FaultLossy, FaultLossy, FaultLedgerElection, FaultStartStall}

// drawFailoverFaults draws every fault and its parameters up front, so a
// mask does not shift the random stream.
func drawFailoverFaults(rng *rand.Rand, cfg Config, nt, nr int) []*foFault {
	n := 2 + rng.Intn(5)
	horizon := time.Duration(cfg.Steps) * 700 * msec
	var fs []*foFault
	for i := range n {
		f := &foFault{idx: i, kind: failoverKinds[rng.Intn(len(failoverKinds))], at: 500*msec + time.Duration(rng.Int63n(int64(horizon)))}
		switch f.kind {
		case FaultHolderKill:
			f.dur, f.node = 2*time.Second+time.Duration(rng.Int63n(int64(6*time.Second))), rng.Intn(nt)
		case FaultRolloutKill:
			f.dur, f.node = 5*time.Second+time.Duration(rng.Int63n(int64(4*time.Second))), rng.Intn(nr)
			if rng.Intn(2) == 0 { // its server led the ledger's stream
				f.elect = 4*time.Second + time.Duration(rng.Int63n(int64(5*time.Second)))
			}
		case FaultLedgerElection:
			f.dur = 4*time.Second + time.Duration(rng.Int63n(int64(5*time.Second)))
			f.elect = f.dur
		case FaultStartStall:
			f.dur = 2*time.Second + time.Duration(rng.Int63n(int64(8*time.Second)))
		case FaultLeaseCut:
			f.dur, f.node = 500*msec+time.Duration(rng.Int63n(int64(4500*msec))), rng.Intn(nt)
		case FaultStoreCut:
			f.dur, f.node = 300*msec+time.Duration(rng.Int63n(int64(3700*msec))), rng.Intn(nt)
		case FaultZombie:
			f.dur, f.node = leaseTTL+time.Duration(rng.Int63n(int64(3*time.Second))), rng.Intn(nt)
			f.notice = 2*time.Second + time.Duration(rng.Int63n(int64(3*time.Second)))
		case FaultLossy:
			f.dur = time.Second + time.Duration(rng.Int63n(int64(5*time.Second)))
		}
		f.enabled = cfg.faultMask == nil || (i < len(cfg.faultMask) && cfg.faultMask[i])
		fs = append(fs, f)
	}
	return fs
}

// holderOr is the lease's holder, else trainer i.
func (w *fo) holderOr(i int) *tnode {
	if h := w.holder(); h != nil {
		return h
	}
	return w.trainers[i]
}

func (w *fo) startFault(f *foFault) {
	if w.finished || f.started {
		return
	}
	f.started = true
	w.active++
	w.injected[f.kind]++
	w.logf("fault start %s", f)
	switch f.kind {
	case FaultHolderKill:
		f.target = w.holderOr(f.node)
		if f.target.alive {
			f.target.kill()
		}
	case FaultRolloutKill:
		if r := w.rollouts[f.node]; r.alive {
			r.kill()
			if f.elect > 0 {
				w.startElection(f.elect, r.name+" died")
			}
		}
	case FaultLedgerElection:
		w.startElection(f.elect, "its server died")
	case FaultStartStall:
		w.startStalls++
	case FaultLeaseCut, FaultStoreCut, FaultZombie:
		n := w.trainers[f.node]
		if f.kind == FaultZombie {
			n = w.holderOr(f.node)
		}
		f.target, f.inc = n, n.inc
		switch f.kind {
		case FaultStoreCut:
			n.storeCut++
		case FaultZombie:
			n.leaseCut++
			n.slowNotice = f.notice
		default:
			n.leaseCut++
		}
	case FaultLossy:
		w.msgActive++
	default:
		w.startExtraFault(f)
	}
	w.after(f.dur, "", func() { w.endFault(f) })
}

func (w *fo) endFault(f *foFault) {
	if f.ended || !f.started {
		return
	}
	f.ended = true
	w.logf("fault end %s", f)
	switch f.kind {
	case FaultHolderKill:
		if !f.target.alive {
			f.target.boot()
		}
	case FaultRolloutKill:
		w.reboot(w.rollouts[f.node])
	case FaultLeaseCut, FaultStoreCut, FaultZombie:
		if n := f.target; n.inc == f.inc {
			switch f.kind {
			case FaultStoreCut:
				n.storeCut--
			case FaultZombie:
				n.leaseCut--
				n.slowNotice = 0
			default:
				n.leaseCut--
			}
		}
	case FaultLossy:
		w.msgActive--
		w.msgQuietSince = w.clock
	case FaultStartStall:
		w.startStalls--
	default:
		w.endExtraFault(f)
	}
	w.active--
	w.quietSince = w.clock
}

// reboot restarts a rollout node once every live trainer node has heard
// it left (a restarted node must not look like the one that died).
func (w *fo) reboot(r *rnode) {
	if r.alive {
		return
	}
	last := w.clock
	for _, n := range w.trainers {
		if n.alive {
			last = max(last, n.gossipAt)
		}
	}
	if last > w.clock {
		w.after(last-w.clock+100*msec, "", func() { w.reboot(r) })
		return
	}
	r.boot()
}

// healAll ends every fault now (the run's steps are done).
func (w *fo) healAll() {
	for _, f := range w.faults {
		if f.started && !f.ended {
			w.endFault(f)
		}
		f.started = true // one not started yet never will
		f.ended = true
	}
	for _, el := range w.elections {
		w.endElection(el)
	}
	for _, n := range w.trainers {
		if !n.alive {
			n.boot()
		}
	}
	for _, r := range w.rollouts {
		w.reboot(r)
	}
}
