package sim

import (
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/asyncrl/asyncrl/actors/publisher/tracker"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport/memhub"
)

const msec = time.Millisecond

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

var (
	subjMinVersion = plan.Weights // as a run's publisher: MinVersionSet beside WeightsPublished
	subjAcks       = plan.AcksAll
)

// subjLoad is where engine takes its LoadWeights: its node's control
// subject, as a cluster's engine host (each simulated engine is a node).
func subjLoad(engine string) string {
	return must(plan.EngineControl(engine))
}

// pubNode is the weight publisher: called by the trainer (publish) it writes the version's
// payload, then its manifest (the commit), then records it in the version
// tracker core and tells every engine behind how to catch up. Like the
// run's publisher Shell it carries out the tracker's Ready after every
// call: the router's minimum rises (MinVersionSet) when the tracker says
// so, and the trainer's publish returns when the tracker settles the
// version (routable somewhere, or out of every engine's reach). Its
// tracker is rebuilt from the store after a crash; engines re-join
// through their periodic acks.
type pubNode struct {
	w       *world
	bus     *memhub.Bus
	tr      *tracker.Tracker
	lastCmd map[string]time.Duration
	// waiters are the trainer's publishes waiting for their version to
	// settle: done("") once routable, done(why) when it cannot be.
	waiters map[int64][]func(err string)
	down    int
	// armed holds the publisher-crash faults waiting for the next publish,
	// oldest first; each crash consumes one and schedules its restart.
	armed []func()
}

// resendAfter is how long the publisher waits before repeating a
// LoadWeights to an engine that is still behind.
const resendAfter = time.Second

func newPub(w *world) (*pubNode, error) {
	p := &pubNode{w: w, bus: w.hub.Connect("pub"), waiters: map[int64][]func(string){}}
	return p, p.rebuild()
}

func (p *pubNode) rebuild() error {
	tc := tracker.DefaultConfig()
	tc.MaxLag, tc.BaseBytes = p.w.wl.MaxLag, 8<<20
	tr, err := tracker.New(tc)
	if err != nil {
		return err
	}
	for v := int64(1); v <= p.w.store.latest(); v++ {
		sv := p.w.store.versions[v]
		if _, err := tr.Publish(tracker.VersionInfo{Version: v, DeltaBytes: sv.deltaBytes, FullBytes: sv.fullBytes}); err != nil {
			return err
		}
	}
	tr.Advance() // a tracker with no engine decides nothing to carry out
	p.tr, p.lastCmd = tr, map[string]time.Duration{}
	return nil
}

func (p *pubNode) start() {
	p.w.subscribe(p.bus, subjAcks, func(m messages.Message) {
		if a, ok := m.(messages.EngineVersionAck); ok {
			p.onAck(a)
		}
	})
	p.heartbeat()
}

// heartbeat repeats the router's minimum version, so a router that
// missed it catches up.
func (p *pubNode) heartbeat() {
	p.w.after(500*msec, "", func() {
		if p.down == 0 {
			p.sendMin()
		}
		p.heartbeat()
	})
}

func (p *pubNode) sendMin() {
	p.checkRoutable()
	p.w.send(p.bus, subjMinVersion, messages.MinVersionSet{Header: messages.Header{RunID: runID, Sender: "pub", Version: p.tr.Target()},
		MinVersion: p.tr.RouterMin()})
}

// apply carries out the tracker's Ready, as the publisher Shell does: a
// risen router minimum is announced, a settled version answers the
// publishes waiting for it.
func (p *pubNode) apply() {
	rd := p.tr.Ready()
	p.tr.Advance()
	if rd.MinVersion != tracker.NoVersion {
		p.w.logf("pub: router minimum raised to %d", rd.MinVersion)
		p.sendMin()
	}
	for _, st := range rd.Settled {
		p.w.logf("pub: version %d settled: %s", st.Version, st.Outcome)
		ws := p.waiters[st.Version]
		delete(p.waiters, st.Version)
		if st.Outcome != tracker.NoEngine {
			p.w.orc.published[st.Version] = true
		}
		for _, done := range ws {
			if st.Outcome == tracker.NoEngine {
				done("no engine serves version " + itoa(st.Version))
			} else {
				done("")
			}
		}
	}
}

// checkRoutable: an engine the tracker calls routable really serves at
// least the minimum (the tracker learns versions from the engine's own
// acks, so it is never ahead of the engine).
func (p *pubNode) checkRoutable() {
	w := p.w
	for _, name := range p.tr.RoutableEngines() {
		w.orc.checks++
		for _, e := range w.engines {
			if e.id == name && e.down == 0 && e.serving < p.tr.MinRoutable() {
				w.fail(InvRouting, "the publisher's tracker calls %s routable at minimum %d; it serves %d", name, p.tr.MinRoutable(), e.serving)
				return
			}
		}
	}
}

// leave forgets an engine taken out of the fleet (the shell's Leave); it
// joins again through its acks when it is back.
func (p *pubNode) leave(engine string) {
	if p.down > 0 {
		return
	}
	p.tr.Leave(engine)
	delete(p.lastCmd, engine)
	p.apply()
}

// publish is the trainer's Publisher call (the real trainer actor
// publishes each step's version before it announces StepDone, in process,
// so no message between them can be lost): it publishes every version up
// to v, then waits, as the Shell's Publish does, until the tracker
// settles v, and calls done("") (routable on some engine) or done(why).
// A publisher that is down, or crashes on the way, fails the call (the
// trainer's step fails); so does a crash while it waits.
func (p *pubNode) publish(v int64, done func(err string)) {
	if p.down > 0 {
		done("publisher down")
		return
	}
	// Waiting before the publish: the tracker may settle the version at
	// once (no engine at all), and a crash on the way fails the waiters.
	p.waiters[v] = append(p.waiters[v], done)
	retry := p.tr.Target() >= v
	for p.down == 0 && p.tr.Target() < v {
		// The trainer's own version is published and awaited at once
		// (PublishAwait), the ones before it (a restarted publisher
		// catching up) only published.
		if !p.publishNext(p.tr.Target()+1 == v) {
			break
		}
	}
	if p.down > 0 {
		return // crashed on the way: crash failed the waiters
	}
	if retry {
		// The newest version again is the retry of a publish that
		// failed (PublishAwait: awaited again, and the engines that
		// failed it commanded again — none yet: the simulated engines
		// never report a failure, tracker.Failed); an older one (the
		// publisher caught up past it) is only awaited.
		var err error
		if v == p.tr.Target() {
			var cmds []tracker.Command
			cmds, err = p.tr.PublishAwait(tracker.VersionInfo{Version: v})
			for _, c := range cmds {
				p.sendLoad(c.Engine, c.Plan)
			}
		} else {
			err = p.tr.Await(v)
		}
		if err != nil {
			p.w.fail(InvProtocol, "publisher: await %d: %v", v, err)
			return
		}
	}
	p.apply()
}

// publishNext publishes target+1: payload, manifest, tracker, commands.
// A publisher-crash fault strikes between the payload and the manifest.
func (p *pubNode) publishNext(await bool) bool {
	w := p.w
	v := p.tr.Target() + 1
	w.store.putPayload(v)
	early := w.cfg.has(BugPublisherAnnouncesEarly)
	if early {
		if !p.announce(v, await) {
			return false
		}
		// The bug names the version to the router too: it sends the
		// tracker's minimum routable version itself, not the tracker's
		// router minimum (which waits for an engine to serve it, and no
		// engine can serve an uncommitted version).
		w.send(p.bus, subjMinVersion, messages.MinVersionSet{Header: messages.Header{RunID: runID, Sender: "pub", Version: v},
			MinVersion: p.tr.MinRoutable()})
	}
	if len(p.armed) > 0 {
		struck := p.armed[0]
		p.armed = p.armed[1:]
		w.logf("pub: crashed after writing the payload of version %d, before its manifest", v)
		p.crash()
		struck()
		return false
	}
	w.store.commit(v, w.now())
	w.logf("pub: version %d committed", v)
	return early || p.announce(v, await)
}

// announce records version v in the tracker (awaited: the trainer waits
// for it) and tells the engines behind. Only a committed version may be
// announced.
func (p *pubNode) announce(v int64, await bool) bool {
	w := p.w
	sv := w.store.versions[v]
	publish := p.tr.Publish
	if await {
		publish = p.tr.PublishAwait
	}
	cmds, err := publish(tracker.VersionInfo{Version: v, DeltaBytes: sv.deltaBytes, FullBytes: sv.fullBytes})
	if err != nil {
		w.fail(InvProtocol, "publisher: %v", err)
		return false
	}
	w.logf("pub: version %d announced (min routable %d)", v, p.tr.MinRoutable())
	for _, c := range cmds {
		p.sendLoad(c.Engine, c.Plan)
	}
	p.apply()
	return true
}

func (p *pubNode) sendLoad(engine string, plan tracker.Plan) {
	w := p.w
	m := messages.LoadWeights{Header: messages.Header{RunID: runID, Sender: "pub", Version: plan.Target},
		Engine: engine, Format: messages.WeightsDelta, BaseVersion: plan.From, Checksum: w.store.versions[plan.Target].sum}
	if plan.Full != tracker.NoVersion {
		m.Format, m.BaseVersion = messages.WeightsFull, plan.Full
	}
	// The engine's receiver starts on the plan's target (the shell's
	// Fetching; one already serving it is left as it is).
	if err := p.tr.Fetching(engine, plan.Target); err != nil {
		w.fail(InvProtocol, "publisher: fetching: %v", err)
		return
	}
	w.logf("pub: LoadWeights %s %s", engine, plan)
	p.lastCmd[engine] = w.now()
	w.send(p.bus, subjLoad(engine), m)
}

func (p *pubNode) onAck(m messages.EngineVersionAck) {
	if p.down > 0 {
		return
	}
	w := p.w
	known := false
	for _, e := range p.tr.Engines() {
		if e.Engine == m.Engine {
			known = true
			break
		}
	}
	if !known {
		if _, err := p.tr.Join(m.Engine, m.Version); err != nil {
			w.fail(InvProtocol, "publisher: join: %v", err)
			return
		}
	} else if _, err := p.tr.Ack(m.Engine, m.Version); err != nil {
		w.fail(InvProtocol, "publisher: ack: %v", err)
		return
	}
	p.apply()
	plan, err := p.tr.Plan(m.Engine)
	if err != nil {
		w.fail(InvProtocol, "publisher: plan: %v", err)
		return
	}
	if w.cfg.has(BugPublisherForgetsLaggards) {
		if _, ok := p.lastCmd[m.Engine]; ok {
			return // commanded once: never again
		}
	}
	if last, ok := p.lastCmd[m.Engine]; !plan.UpToDate() && (!ok || w.now()-last >= resendAfter) {
		p.sendLoad(m.Engine, plan)
	}
}

// crash takes the publisher down: the publishes waiting fail (the
// trainer's step fails, as a publish cut by its process's death).
func (p *pubNode) crash() {
	p.down++
	ws := p.waiters
	p.waiters = map[int64][]func(string){}
	for _, v := range slices.Sorted(maps.Keys(ws)) {
		for _, done := range ws[v] {
			done("publisher down")
		}
	}
}

func (p *pubNode) restart() {
	p.down--
	if p.down > 0 {
		return
	}
	if err := p.rebuild(); err != nil {
		p.w.fail(InvProtocol, "publisher: rebuild after restart: %v", err)
		return
	}
	// The publish the crash interrupted failed the trainer's step: a
	// restarted publisher catches up to the trainer's durable progress,
	// as a new term's publisher starts from the durable step (nobody
	// waits: the trainer's retry does).
	for v := p.w.trainer.durable.next - 1; p.down == 0 && p.tr.Target() < v; {
		if !p.publishNext(false) {
			return
		}
	}
}
