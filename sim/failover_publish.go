package sim

import (
	"errors"
	"fmt"
	"math/rand"

	"github.com/asyncrl/asyncrl/actors/publisher/tracker"
	"github.com/asyncrl/asyncrl/actors/trainer/steprule"
	"github.com/asyncrl/asyncrl/cluster/term"
	"github.com/asyncrl/asyncrl/config"
)

// A term's publisher in the failover world: the tracker core
// (actors/publisher/tracker) stepped as the publisher Shell steps it in a
// term's pipeline (actors/publisher/shell.go under cluster/weightsync's
// Sync, with the term's remote engines, cluster/node/remote.go). The
// cluster's publish of a step, after its weights are in the term's bucket
// (storeMode.publishVersion → Sync.announce → Sync.publishInfo):
//   - WaitEngines: while the tracker has no engine (every engine node
//     left), it polls every 100 ms (EngineSet.waitEngines);
//   - Shell.Publish: the tracker's PublishAwait, its commands dispatched
//     (each becomes the term core's EngineTarget: EngineSet.dispatch →
//     TermEngines.Target), and it waits until the tracker settles the
//     version — Routable once an engine acked it (the engines' acks reach
//     the shell on the bus: Shell.onAck → Tracker.Ack);
//   - NoEngine (every engine left meanwhile) is no failure with remote
//     engines: WaitServed polls every 100 ms until some engine of the
//     tracker serves the version (EngineSet.waitServed).
//
// So the cluster's publish never fails for want of an ack: it waits,
// unbounded but by the trainer's context (the pipeline's stop); only the
// bucket write fails it (failover_steprule.go). The trainer's step rule
// hears Trained only when the publish returned. The tracker's versions
// are the term's own (its version 0 is the term's From.Version), as the
// term's pipeline numbers them.

// pollEngines is how often the cluster's publish looks again for an
// engine (waitEngines, waitServed).
const pollEngines = 100 * msec

// pipePub is a term's publisher shell: its tracker, the newest ack each
// engine's host sent it (the oracle's witness, kept apart from the
// tracker's decisions) and the publish waiting, if any.
type pipePub struct {
	tr    *tracker.Tracker
	acked map[string]int64
	wait  *pubWait
}

// pubWait is a step's publish after its bucket write: waiting for an
// engine (noEngines), for the tracker to settle the version (settling),
// or, once it settled NoEngine, for an engine to serve it (served).
type pubWait struct {
	step  int64
	phase pubPhase
	said  bool // the wait for an engine was logged (once, as the cluster's Event)
}

type pubPhase int

const (
	noEngines pubPhase = iota
	settling
	served
)

// publisher is the pipe's publisher shell, made with the pipe's first
// use (its tracker at the term's version 0).
func (p *pipe) publisher() *pipePub {
	if p.pub == nil {
		// The cluster's tracker config (wiring.PublisherTracker): the
		// run's staleness budget as its routing lag (drawRouteLag).
		tc := tracker.DefaultConfig()
		tc.MaxLag = p.node.w.routeLag
		tr, err := tracker.New(tc)
		if err != nil {
			panic(fmt.Sprintf("sim: failover: tracker: %v", err)) // the default config validates
		}
		p.pub = &pipePub{tr: tr, acked: map[string]int64{}}
	}
	return p.pub
}

// live: the pipe is still its node's running pipeline.
func (p *pipe) live() bool { return !p.stopped && p.node.pipe == p }

// engineJoined registers engine with the publisher holding no version of
// the term (EngineSet.joined → Shell.Join); its catch-up command becomes
// the core's EngineTarget.
func (p *pipe) engineJoined(e string) {
	pub := p.publisher()
	cmd, err := pub.tr.Join(e, tracker.NoVersion)
	if err != nil {
		p.node.w.fail(InvProtocol, "%s: publisher of token %d: join %s: %v", p.node.name, p.token, e, err)
		return
	}
	n, tok, ver := p.node, p.token, p.base.Version+cmd.Plan.Target
	n.later(0, "", func() { n.step(term.EngineTarget{Token: tok, Engine: e, Version: ver}) })
	p.applyPub()
}

// engineLeft forgets engine (EngineSet.Remove → Shell.Leave): a version
// it alone could still reach settles NoEngine.
func (p *pipe) engineLeft(e string) {
	p.publisher().tr.Leave(e)
	p.applyPub()
}

// engineAcked: engine's ack of version ver of term tok reaches node n. It
// goes to the publisher shell of the term's pipeline (acks are on the
// term's subjects: a stopped pipeline's shell, or another term's, never
// hears it), which steps the tracker; an ack the tracker takes as new
// raises the router's version of the engine (Shell.setRouterVersion) and
// reaches the core as EngineServing (the agent's feedServing steps the
// core with what the tracker's engines serve).
func (n *tnode) engineAcked(tok uint64, e string, ver int64) {
	p := n.pipe
	if !n.alive || p == nil || p.token != tok || !p.live() {
		return
	}
	pub := p.publisher()
	ok, err := pub.tr.Ack(e, ver-p.base.Version)
	if errors.Is(err, tracker.ErrUnknownEngine) {
		return // it left the term meanwhile (Shell.onAck logs it refused)
	}
	pub.acked[e] = max(pub.acked[e], ver)
	switch {
	case err != nil:
		n.w.fail(InvProtocol, "%s: publisher of token %d: ack of %s version %d: %v", n.name, tok, e, ver, err)
		return
	case !ok:
		return // late or duplicate: counted by the tracker
	}
	if v, reg := p.router[e]; reg && ver > v {
		p.router[e] = ver
	}
	n.step(term.EngineServing{Token: tok, Engine: e, Version: ver})
	p.applyPub()
}

// publishWritten: step's weights are in the term's bucket; the publish
// goes on to the shell (WaitEngines, then Shell.Publish).
func (p *pipe) publishWritten(step int64) {
	p.publisher().wait = &pubWait{step: step, phase: noEngines}
	p.pubWaitEngines()
}

// pubWaitEngines hands the publish to the shell once the tracker has an
// engine, polling as EngineSet.waitEngines does.
func (p *pipe) pubWaitEngines() {
	pub, n := p.publisher(), p.node
	wt := pub.wait
	if len(pub.tr.Engines()) == 0 {
		if !wt.said {
			wt.said = true
			n.w.logf("%s: publisher of token %d: no engine to publish version %d to: waiting for a node with the engine role", n.name, p.token, p.base.Version+wt.step)
		}
		n.later(pollEngines, "", func() {
			if p.live() && pub.wait == wt {
				p.pubWaitEngines()
			}
		})
		return
	}
	cmds, err := pub.tr.PublishAwait(tracker.VersionInfo{Version: wt.step})
	if err != nil {
		n.w.fail(InvProtocol, "%s: publisher of token %d: publish of step %d: %v", n.name, p.token, wt.step, err)
		return
	}
	wt.phase = settling
	ver := p.base.Version + wt.step
	p.targets = append(p.targets, target{n.w.clock, ver})
	for _, c := range p.dispatchTo(cmds) {
		n.step(term.EngineTarget{Token: p.token, Engine: c.Engine, Version: p.base.Version + c.Plan.Target})
	}
	if n.w.cfg.has(BugPublishSkipsAcks) {
		// The planted bug: the publish returns once dispatched.
		n.w.logf("%s: publisher of token %d: version %d dispatched, publish returns without waiting for an engine (planted bug)", n.name, p.token, ver)
		p.pubDone()
		return
	}
	p.applyPub()
}

// applyPub carries out the tracker's Ready, as the shell's applyLocked
// does: a settled version ends the publish waiting for it (Routable), or
// sends it on to wait for an engine to serve it (NoEngine). The router's
// minimum is read where the rollouts are routed (routable).
func (p *pipe) applyPub() {
	pub := p.publisher()
	rd := pub.tr.Ready()
	pub.tr.Advance()
	wt := pub.wait
	if wt == nil || !p.live() {
		return
	}
	for _, st := range rd.Settled {
		if st.Version != wt.step || wt.phase != settling {
			continue
		}
		p.node.w.logf("%s: publisher of token %d: version %d %s", p.node.name, p.token, p.base.Version+st.Version, st.Outcome)
		if st.Outcome == tracker.Routable {
			p.pubDone()
			return
		}
		wt.phase = served
		p.pubWaitServed()
		return
	}
}

// pubWaitServed ends the publish once some engine of the tracker serves
// its version, polling as EngineSet.waitServed does.
func (p *pipe) pubWaitServed() {
	pub, n := p.publisher(), p.node
	wt := pub.wait
	for _, st := range pub.tr.Engines() {
		if st.Serving >= wt.step {
			n.w.logf("%s: publisher of token %d: version %d served by %s after no engine could reach it", n.name, p.token, p.base.Version+wt.step, st.Engine)
			p.pubDone()
			return
		}
	}
	n.later(pollEngines, "", func() {
		if p.live() && pub.wait == wt {
			p.pubWaitServed()
		}
	})
}

// pubDone: the publish returned; the rule hears Trained.
func (p *pipe) pubDone() {
	step := p.publisher().wait.step
	p.pub.wait = nil
	p.stepRule(steprule.Trained{Step: step, Version: step})
}

// ackedAtLeast reports whether some engine's ack of version ver (or a
// later one) reached the term's publisher: the oracle's witness that a
// publish waited for an engine.
func (p *pipe) ackedAtLeast(ver int64) bool {
	for _, v := range p.publisher().acked {
		if v >= ver {
			return true
		}
	}
	return false
}

// routeLagSalt seeds the draw of a run's routing lag, apart from the
// run's other streams (what they draw stays as it was).
const routeLagSalt = 0x31_1a90_7e57

// drawRouteLag is a run's staleness budget in versions, the tracker's
// MaxLag (config.Config.MaxVersionLag): the defaults' on half the seeds
// (trainer.max_staleness_steps 2), else 0 (router.version_rule newest:
// only the newest version is routed, so a publish gates the rollouts
// until an engine serves it) or 1.
func drawRouteLag(seed int64) int64 {
	rng := rand.New(rand.NewSource(seed ^ routeLagSalt))
	if rng.Intn(2) == 0 {
		return config.Default().MaxVersionLag()
	}
	return int64(rng.Intn(2))
}

// routable: engine e may take the term's rollouts — it acked a version of
// the term (router[e] ≥ 0) at or above the router's minimum, which the
// cluster's router gets from this tracker (routerSink.SetMinVersion,
// cluster/node/weightsync.go) and gates on (actors/router/policy).
// belowMin: it acked one, but below the minimum.
func (p *pipe) routable(e string) (ok, belowMin bool) {
	v, reg := p.router[e]
	if !reg || v < 0 {
		return false, false
	}
	if p.pub != nil && v-p.base.Version < p.pub.tr.RouterMin() {
		return false, true
	}
	return true, false
}
