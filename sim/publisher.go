package sim

import (
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
// tracker core and tells every engine behind how to catch up. Its tracker
// is rebuilt from the store after a crash; engines re-join through their
// periodic acks.
type pubNode struct {
	w       *world
	bus     *memhub.Bus
	tr      *tracker.Tracker
	lastCmd map[string]time.Duration
	down    int
	// armed holds the publisher-crash faults waiting for the next publish,
	// oldest first; each crash consumes one and schedules its restart.
	armed []func()
}

// resendAfter is how long the publisher waits before repeating a
// LoadWeights to an engine that is still behind.
const resendAfter = time.Second

func newPub(w *world) (*pubNode, error) {
	p := &pubNode{w: w, bus: w.hub.Connect("pub")}
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

// heartbeat repeats the minimum version, so a router that missed it
// catches up.
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
		MinVersion: p.tr.MinRoutable()})
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
}

// publish is the trainer's Publisher call (the real trainer actor
// publishes each step's version before it announces StepDone, in process,
// so no message between them can be lost): it publishes every version up
// to v and reports whether v is out. A publisher that is down, or crashes
// on the way, fails the call (the trainer's step fails).
func (p *pubNode) publish(v int64) bool {
	for p.down == 0 && p.tr.Target() < v {
		if !p.publishNext() {
			return false
		}
	}
	return p.down == 0
}

// publishNext publishes target+1: payload, manifest, tracker, commands.
// A publisher-crash fault strikes between the payload and the manifest.
func (p *pubNode) publishNext() bool {
	w := p.w
	v := p.tr.Target() + 1
	w.store.putPayload(v)
	early := w.cfg.has(BugPublisherAnnouncesEarly)
	if early && !p.announce(v) {
		return false
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
	return early || p.announce(v)
}

// announce records version v in the tracker and tells the engines behind
// and the router. Only a committed version may be announced.
func (p *pubNode) announce(v int64) bool {
	w := p.w
	sv := w.store.versions[v]
	cmds, err := p.tr.Publish(tracker.VersionInfo{Version: v, DeltaBytes: sv.deltaBytes, FullBytes: sv.fullBytes})
	if err != nil {
		w.fail(InvProtocol, "publisher: %v", err)
		return false
	}
	w.logf("pub: version %d announced (min routable %d)", v, p.tr.MinRoutable())
	for _, c := range cmds {
		p.sendLoad(c.Engine, c.Plan)
	}
	p.sendMin()
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

func (p *pubNode) crash() { p.down++ }

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
	// as a new term's publisher starts from the durable step.
	p.publish(p.w.trainer.durable.next - 1)
}
