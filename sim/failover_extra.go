package sim

import (
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"time"

	"github.com/asyncrl/asyncrl/actors/publisher/tracker"
	"github.com/asyncrl/asyncrl/cluster/term"
)

// The failover world's generators of issue 37. Measured with sim/simcov,
// the scenario reached three quarters of the term core's branches: no
// node ever lost quorum, stopped cleanly, saw its pipeline fail, probed a
// stream, found the durable progress without its checkpoint, waited for a
// consumed event, saw a rollout node come back with other engines, or got
// a repeated answer or a late notice coalesced with the next. A seed now
// also draws, from a second stream of its own (seed ^ failoverSalt, so the
// schedule drawn before issue 37 stays as it was), faults appended after
// the others:
//
//   - quorum-loss: a trainer node's side loses quorum for a while (the
//     holder steps down; a node that wins the lease meanwhile gives it up);
//   - node-stop: a trainer node stops cleanly (term.Stop: a running term
//     saves what it trained, then resigns) and starts again later;
//   - pipeline-fail: the holder's pipeline fails (term.Failed);
//   - stream-outage: the term's trajectory buffer fails its probes for a
//     while — mostly a few seconds (failing, recovered), sometimes past
//     the watch's UnhealthyAfter (the term steps down) — and its leader
//     may move to the holder when it recovers;
//   - checkpoint-lost: the holder dies and, for a while, the durable
//     progress names no checkpoint: claimers refuse to restart the policy
//     from the seed's weights and step down, until it is readable again;
//   - mirror-lag: the holder's consumed events come late, after the steps
//     that trained their groups;
//   - engine-swap: a rollout node restarts hosting another engine, or
//     none for a while;
//
// and rare inputs on every seed: a claimer killed right after its claim
// landed (before its requeue), a claim answered twice, a step announced
// twice, the elector's status repeated, a loss notice coalesced with the
// re-acquisition that follows it (a watcher reports only the latest
// state), the holder's own rollout status, a holder that dies just after
// the run's last durable step (a standby claims a complete run).

// failoverSalt seeds the failover world's second stream.
const failoverSalt = 0x37_fa11_0fe7

// Faults of the failover world added by issue 37.
const (
	FaultQuorumLoss     FaultKind = "quorum-loss"
	FaultNodeStop       FaultKind = "node-stop"
	FaultPipelineFail   FaultKind = "pipeline-fail"
	FaultStreamOutage   FaultKind = "stream-outage"
	FaultCheckpointLost FaultKind = "checkpoint-lost"
	FaultMirrorLag      FaultKind = "mirror-lag"
	FaultEngineSwap     FaultKind = "engine-swap"
)

var extraFailoverKinds = []FaultKind{FaultQuorumLoss, FaultNodeStop, FaultPipelineFail, FaultStreamOutage,
	FaultCheckpointLost, FaultMirrorLag, FaultEngineSwap}

// foExtra is what a failover seed drew for issue 37's inputs.
type foExtra struct {
	rng *rand.Rand
	// Probabilities of the rare inputs.
	dupClaim, dupStep, dupNotice, coalesce, ownStatus, stopAtLast float64
	// killAfterClaim: a claimer dies right after its claim landed in the
	// store, before it heard the answer (and so before it requeued what
	// older terms had in flight).
	killAfterClaim float64
	// claimKills counts those deaths: at most maxClaimKills a run, or a
	// run of unlucky draws kills every claimer in turn and nothing
	// becomes durable with every (drawn) fault healed.
	claimKills int
	// dieAfterLast: the holder dies right after the last durable step.
	dieAfterLast bool
}

func drawFailoverExtra(cfg Config, nt, nr, base int) (foExtra, []*foFault) {
	rng := rand.New(rand.NewSource(cfg.Seed ^ failoverSalt))
	x := foExtra{rng: rng}
	p := func(odds int) float64 {
		if rng.Intn(odds) != 0 {
			return 0
		}
		return 0.1 + 0.4*rng.Float64()
	}
	x.dupClaim, x.dupStep, x.dupNotice, x.coalesce, x.ownStatus, x.stopAtLast = p(3), p(3), p(3), p(2), p(2), p(4)
	x.killAfterClaim = p(3)
	x.dieAfterLast = rng.Intn(4) == 0
	horizon := time.Duration(cfg.Steps) * 700 * msec
	var fs []*foFault
	for i, n := 0, 1+rng.Intn(2); i < n; i++ {
		f := &foFault{idx: base + len(fs), kind: extraFailoverKinds[rng.Intn(len(extraFailoverKinds))],
			at: 500*msec + time.Duration(rng.Int63n(int64(horizon))), node: rng.Intn(nt)}
		switch f.kind {
		case FaultQuorumLoss:
			f.dur = time.Second + time.Duration(rng.Int63n(int64(3*time.Second)))
		case FaultNodeStop:
			f.dur = 2*time.Second + time.Duration(rng.Int63n(int64(4*time.Second)))
		case FaultPipelineFail:
			f.dur = 100 * msec
		case FaultStreamOutage:
			f.dur = time.Second + time.Duration(rng.Int63n(int64(7*time.Second)))
			if rng.Intn(4) == 0 { // past UnhealthyAfter: the watch steps the term down
				f.dur = 31*time.Second + time.Duration(rng.Int63n(int64(8*time.Second)))
			}
		case FaultCheckpointLost:
			f.dur = 2*time.Second + time.Duration(rng.Int63n(int64(3*time.Second)))
		case FaultMirrorLag:
			f.dur = time.Second + time.Duration(rng.Int63n(int64(4*time.Second)))
			f.notice = 300*msec + time.Duration(rng.Int63n(int64(1500*msec)))
		case FaultEngineSwap:
			f.dur = 5*time.Second + time.Duration(rng.Int63n(int64(4*time.Second)))
			f.node = rng.Intn(nr)
			f.swap = swapNone + rng.Intn(2)
		}
		f.enabled = cfg.faultMask == nil || (f.idx < len(cfg.faultMask) && cfg.faultMask[f.idx])
		fs = append(fs, f)
	}
	return x, fs
}

// chance draws one rare input.
func (x *foExtra) chance(p float64) bool { return p > 0 && x.rng.Float64() < p }

// startExtraFault starts one of issue 37's faults; false for another kind.
func (w *fo) startExtraFault(f *foFault) bool {
	switch f.kind {
	case FaultQuorumLoss:
		n := w.holderOr(f.node)
		f.target, f.inc = n, n.inc
		if n.alive {
			n.step(term.QuorumChanged{Train: false})
		}
	case FaultNodeStop:
		n := w.holderOr(f.node)
		f.target = n
		if n.alive {
			n.stopping = true
			w.logf("%s: stops cleanly", n.name)
			if w.x.rng.Intn(2) == 0 {
				// ... while the store is unreachable: a save the stop
				// waits for fails (the term fails while stopping).
				n.storeCut++
				f.inc = n.inc
				f.notice = 1 // the store cut is undone at the end
			}
			if p := n.pipe; p != nil {
				p.stopped = true // the shell stops the pipeline first, then tells the core
			}
			n.step(term.Stop{})
			if w.x.chance(0.3) {
				n.step(term.Stop{}) // a second signal while stopping
			}
		}
	case FaultPipelineFail:
		if h := w.holder(); h != nil && h.core.Running() {
			tok, _ := h.core.Holding()
			w.logf("%s: the pipeline of token %d fails", h.name, tok)
			h.step(term.Failed{Token: tok, Err: "trainer: step failed (simulated)"})
		}
	case FaultBucketOutage:
		w.bucketOut++
	case FaultStreamOutage:
		w.outage++
	case FaultCheckpointLost:
		if h := w.holder(); h != nil {
			f.target = h
			h.kill()
		}
		w.ckptLost++
	case FaultMirrorLag:
		w.mirrorLag = max(w.mirrorLag, f.notice)
	case FaultEngineSwap:
		if r := w.rollouts[f.node]; r.alive {
			r.kill()
		}
	default:
		return false
	}
	return true
}

// endExtraFault ends one of issue 37's faults; false for another kind.
func (w *fo) endExtraFault(f *foFault) bool {
	switch f.kind {
	case FaultQuorumLoss:
		if n := f.target; n.alive && n.inc == f.inc {
			n.step(term.QuorumChanged{Train: true})
		}
	case FaultNodeStop:
		if n := f.target; f.notice == 1 && n.inc == f.inc {
			n.storeCut--
		}
		if n := f.target; !n.alive || n.stopping {
			if n.alive {
				n.kill() // it did not finish stopping: the process is killed
			}
			n.boot()
		}
	case FaultPipelineFail:
	case FaultBucketOutage:
		w.bucketOut--
	case FaultStreamOutage:
		w.outage--
		w.moved = true // the recovered stream elects its leader, maybe on the holder
	case FaultCheckpointLost:
		w.ckptLost--
		if n := f.target; n != nil && !n.alive {
			n.boot() // it restarts as a standby, as after holder-kill
		}
	case FaultMirrorLag:
		w.mirrorLag = 0
	case FaultEngineSwap:
		w.swapEngines(w.rollouts[f.node], f.swap)
	default:
		return false
	}
	return true
}

// ---- the shell's extra inputs --------------------------------------------------

// probeLoop probes the running term's trajectory buffer every second (as
// cluster/node's termhealth does), failing while a stream-outage lasts;
// the first probe after one ends may find the leaders moved to this node.
func (n *tnode) probeLoop() {
	n.loop(observeEvery, observeEvery, func() {
		w := n.w
		tok, held := n.core.Holding()
		if !held || !n.core.Running() {
			return
		}
		in := term.Probe{Token: tok, Dep: "groups"}
		if w.outage > 0 {
			in.Err = "no leader (electing)"
		} else if w.moved {
			w.moved = false
			switch w.x.rng.Intn(3) {
			case 0:
				in.Moved = []string{""}
			case 1:
				in.Moved = []string{"sampling"}
			}
		}
		n.step(in)
		if in.Err != "" && n.core.Running() {
			w.record(true, "%s: failing %v", n.name, n.core.Failing())
		}
		if x := w.x; x.chance(x.ownStatus) {
			// The holder's own rollout actors report too (roles all); the
			// core leaves them to the pipeline's stop.
			n.step(term.RolloutStatus{Token: tok, Node: n.name})
		}
	})
}

// marksHealth reports the health of the durable ledger's writes to the
// term's watch when its trained marks go out: failing while a
// stream-outage lasts (its servers have no leader for any stream). The
// marks themselves are written by markTrained (failover_ledger.go); this
// input only reaches the watch's LedgerWrites dependency, as the agent's
// mirror reports a write that failed after its retries.
func (n *tnode) marksHealth(tok uint64) {
	w := n.w
	err := ""
	if w.outage > 0 {
		err = "ledger write: no leader (electing)"
	}
	n.later(w.jitter(msec, 20*msec), "", func() { n.step(term.LedgerWrite{Token: tok, Err: err}) })
}

// mirrorDelay is how late a term's ledger mirror hears a pipeline event
// (a consumed or requeued prompt): a few ms, or seconds more while a
// mirror-lag fault lasts — the consumed events then come after the steps
// that trained their groups, and the term waits for them before it saves.
func (w *fo) mirrorDelay() time.Duration {
	return w.jitter(msec, 30*msec) + w.mirrorLag
}

// maxClaimKills bounds the claimers killed right after their claims in one
// run (seed 1951 at --steps 10 killed six in a row: no progress).
const maxClaimKills = 2

// claimAnswered may deliver a claim's answer twice (a retried request
// whose first answer came back after all); or the claimer dies before the
// answer reaches it (it restarts as a standby a few seconds later).
func (n *tnode) claimAnswered(in term.ProgressClaimed) {
	w := n.w
	if w.x.claimKills < maxClaimKills && w.x.chance(w.x.killAfterClaim) && !w.finished {
		w.x.claimKills++
		w.logf("%s: dies right after its claim of token %d landed", n.name, in.Token)
		n.kill()
		w.after(w.jitter(2*time.Second, 5*time.Second), "", func() {
			if !n.alive {
				n.boot()
			}
		})
		return
	}
	n.later(w.jitter(msec, 20*msec), "", func() { n.step(in) })
	if w.x.chance(w.x.dupClaim) {
		n.later(w.jitter(30*msec, 300*msec), "", func() { n.step(in) })
	}
}

// stepTrained announces a trained step to the core, sometimes twice (the
// trainer's StepDone repeated).
func (n *tnode) stepTrained(in term.StepTrained) {
	n.step(in)
	if x := n.w.x; x.chance(x.dupStep) {
		n.step(in)
	}
}

// claimed is the durable progress a claim hands out: without its
// checkpoint while a checkpoint-lost fault lasts.
func (w *fo) claimedProgress(p term.Progress) term.Progress {
	if w.ckptLost > 0 && p.Version > 0 {
		p.Checkpoint = ""
	}
	return p
}

// dieAfterLast: the holder dies right after the run's last durable step,
// before it heard the save was acknowledged: a standby claims a complete
// run (term: RunComplete at the claim, Done).
func (w *fo) dieAfterLast(n *tnode) {
	if !w.x.dieAfterLast || !n.alive {
		return
	}
	w.logf("%s: dies right after the last durable step", n.name)
	n.kill()
}

// Engine swaps (engine-swap): how a rollout node comes back.
const (
	swapNone    = 1 // without an engine for a while, then with its own again
	swapRenamed = 2 // with another engine (a new GPU, a new name)
)

// engineName is the engine rollout node r hosts in this incarnation: its
// own, another after a swap, or none ("").
func (r *rnode) engineName() string {
	switch r.swap {
	case swapNone:
		return ""
	case swapRenamed:
		return r.name + "-e1"
	}
	return r.name + "-e0"
}

// swapEngines: the node restarts with other engines; one that came back
// without any gets its own again a little later.
// A node that is up (another fault restarted it meanwhile) is restarted
// again: its engines change only across a restart.
func (w *fo) swapEngines(r *rnode, swap int) {
	if r.alive && r.swap == swap {
		return // it already hosts those engines
	}
	if swap == swapRenamed && r.alive {
		// A live node's engine is replaced (a new process, a new name):
		// gossip carries its new engines without the node ever leaving.
		w.logf("%s: its engine is replaced by %s-e1", r.name, r.name)
		r.engineGone("replaced")
		r.swap, r.engTok, r.engVer = swapRenamed, 0, -1
		w.gossip(200*msec, time.Second)
		return
	}
	w.restartAs(r, swap)
	if swap != swapNone {
		return
	}
	w.after(w.jitter(2*time.Second, 4*time.Second), "", func() {
		if r.swap == swapNone {
			w.restartAs(r, 0)
		}
	})
}

// restartAs restarts rollout node r hosting the engines of swap. A live
// node that comes back without an engine lost it first: its engine dies,
// the episodes on it abort and their groups are reported aborted, and
// the node restarts 50–400 ms later (a delay drawn from the rollout
// model's stream), before or after its next status.
func (w *fo) restartAs(r *rnode, swap int) {
	if r.alive && swap == swapNone {
		r.engineGone("died")
		r.engDown = true
		inc, d := r.inc, 50*msec+time.Duration(w.ro.rng.Int63n(int64(350*msec)))
		w.after(d, "", func() {
			if r.alive && r.inc != inc {
				return // restarted meanwhile: its swap (a rename, say) stands
			}
			if r.alive {
				r.kill()
			}
			r.swap = swap
			w.after(100*msec, "", func() { w.reboot(r) })
		})
		return
	}
	if r.alive {
		r.kill()
	}
	r.swap = swap
	w.after(100*msec, "", func() { w.reboot(r) })
}

// checkHolder: a node without quorum runs no term, and a running term's
// durable progress is one the store really held.
func (w *fo) checkHolder(n *tnode) {
	w.checks++
	if !n.core.Quorate() && n.core.Running() {
		w.fail(InvFencing, "%s runs a term without quorum", n.name)
		return
	}
	if _, holding := n.core.Holding(); !holding {
		// A standby routes to no engine and watches no term.
		for _, r := range w.rollouts {
			if e := r.engine(); e != "" && n.core.Remote(e) {
				w.fail(InvRouting, "%s holds no lease but has %s as a remote engine", n.name, e)
				return
			}
		}
		if f := n.core.Failing(); f != nil {
			w.fail(InvProtocol, "%s holds no lease but reports failing dependencies %v", n.name, f)
			return
		}
	}
	d, ok := n.core.Durable()
	if !ok || d.Step == 0 {
		return
	}
	saved, held := w.store.history[d.Step]
	// slices.Equal, not a comparison of their fmt.Sprint: this runs after
	// every event, and formatting both lists was most of a failover run's
	// time.
	if !held || !slices.Equal(saved, d.Prompts) || d.Step > w.store.prog.Step {
		w.fail(InvTrainedDurable, "%s's term says step %d is durable (%v), the store holds %v at durable step %d",
			n.name, d.Step, groupsOf(d.Prompts), groupsOf(saved), w.store.prog.Step)
	}
}

// ---- the pipeline's extra inputs -------------------------------------------

// removedAt notes an engine taken out of routing: the publisher still
// dispatches to it for a while (it hears of the removal late).
func (p *pipe) removedAt(e string) {
	if p.removed == nil {
		p.removed = map[string]time.Duration{}
	}
	p.removed[e] = p.node.w.clock
}

// dispatchTo lists the commands the publisher dispatches for a new
// version: the tracker's, and the version's for the engines removed less
// than a second ago, which a publish that raced the removal still
// commands (the core ignores those: not a remote engine of the term).
func (p *pipe) dispatchTo(cmds []tracker.Command) []tracker.Command {
	w := p.node.w
	out := slices.Clone(cmds)
	for _, e := range slices.Sorted(maps.Keys(p.removed)) {
		if w.clock-p.removed[e] < time.Second && !slices.ContainsFunc(cmds, func(c tracker.Command) bool { return c.Engine == e }) {
			out = append(out, tracker.Command{Engine: e, Plan: tracker.Plan{Target: p.publisher().tr.Target()}})
		}
	}
	return out
}

// bufferWaits holds a stored group's delivery (the judge's fetch) while
// the trajectory buffer has no leader (stream-outage): it is delivered
// once it has one. The group is stored (buffered): the rollout node that
// stored it no longer holds it. A store itself is the rollout's, retried
// on the outcome core's schedule (failover_outcome.go).
func (p *pipe) bufferWaits(g *pgroup) bool {
	w := p.node.w
	if w.outage == 0 {
		return false
	}
	g.state = "buffered"
	w.after(250*msec, "", func() { p.deliver(g) })
	return true
}

// maybeStopAtLast: the holder is stopped cleanly right after its trainer
// finished the term's last step, before that step is durable (the stop
// saves it, then finishes the run and resigns).
func (n *tnode) maybeStopAtLast(p *pipe) {
	w := n.w
	if p.local < p.steps || p.stopped || n.stopping || !w.x.chance(w.x.stopAtLast) {
		return
	}
	w.logf("%s: stops cleanly after the term's last step", n.name)
	n.stopping = true
	p.stopped = true
	n.step(term.Stop{})
}

// countEvent counts the term cores' events by kind, for the run's last
// line (logKinds).
func (w *fo) countEvent(e term.Event) {
	if w.kinds == nil {
		w.kinds = map[term.Kind]int{}
	}
	w.kinds[e.Kind]++
}

// logKinds logs how many events of each kind the term cores emitted.
func (w *fo) logKinds() {
	var b []byte
	for _, k := range slices.Sorted(maps.Keys(w.kinds)) {
		b = fmt.Appendf(b, " %s=%d", k, w.kinds[k])
	}
	w.logf("term events:%s", b)
}
