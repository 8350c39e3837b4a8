package sim

import (
	"fmt"
	"strconv"
	"time"

	"github.com/asyncrl/asyncrl/cluster/weightsync/targets"
	"github.com/asyncrl/asyncrl/engine/latency"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/memhub"
)

// heartbeatEvery is how often an engine reports health, load and its
// version (the router's probe and scrape, the publisher's ack stream).
const heartbeatEvery = 200 * msec

type engineReq struct {
	traj     string
	turn     int32
	max      int
	out      []int32
	versions []int32
}

// engineNode is one inference engine: the latency core models its
// continuous batching; the node adds weight updates, crashes, hangs,
// slowdowns and frozen metrics.
type engineNode struct {
	w       *world
	bus     *memhub.Bus
	id      string
	sched   *latency.Scheduler
	reqs    map[uint64]*engineReq
	nextID  uint64
	inc     int
	serving int64
	// loadedSum is the checksum of the weights actually loaded.
	loadedSum string

	down, hung, slow, frozen, corrupt int
	// left counts engine-leave faults in progress (out of the fleet).
	left                       int
	updating, paused, stepping bool
	// agent is the engine's weight-sync agent: the real target state
	// machine (cluster/weightsync/targets) decides which version it loads
	// next, when it acks again and what a failure does; cmd is the newest
	// LoadWeights, whose plan (delta chain or full base) the load follows.
	agent      targets.State
	cmd        messages.LoadWeights
	stalled    func()
	frozenLoad *messages.EngineLoad
	subjects   map[transport.EngineTopic]string
}

func latencyConfig() latency.Config {
	c := latency.DefaultConfig()
	c.MaxNumSeqs, c.MaxWaiting, c.CacheBlocks = 16, 64, 256
	return c
}

func newEngine(w *world, i int) *engineNode {
	id := fmt.Sprintf("e%d", i)
	return &engineNode{w: w, bus: w.hub.Connect(id), id: id, sched: latency.New(latencyConfig()),
		reqs: map[uint64]*engineReq{}, loadedSum: w.store.checksum(0), agent: targets.New(0)}
}

func (e *engineNode) start() {
	e.w.subscribe(e.bus, turnSubject(e.id), func(m messages.Message) {
		if tr, ok := m.(messages.TurnRequest); ok {
			e.onTurn(tr)
		}
	})
	e.w.subscribe(e.bus, subjLoad(e.id), func(m messages.Message) {
		if lw, ok := m.(messages.LoadWeights); ok {
			e.onLoad(lw)
		}
	})
	e.heartbeat()
}

func (e *engineNode) alive() bool { return e.down == 0 && e.hung == 0 }

func (e *engineNode) heartbeat() {
	e.w.after(heartbeatEvery, "", func() {
		if e.alive() {
			e.sendHealth()
			e.sendLoadReport()
			e.sendAck()
		}
		e.heartbeat()
	})
}

// subject is the engine's subject for kind, built once per engine (every
// heartbeat sends on three of them).
func (e *engineNode) subject(kind transport.EngineTopic) string {
	if s, ok := e.subjects[kind]; ok {
		return s
	}
	s := must(plan.Engine(e.id, kind))
	if e.subjects == nil {
		e.subjects = map[transport.EngineTopic]string{}
	}
	e.subjects[kind] = s
	return s
}

func (e *engineNode) header() messages.Header {
	return messages.Header{RunID: runID, Sender: e.id, Version: e.serving}
}

func (e *engineNode) sendHealth() {
	e.w.send(e.bus, e.subject(transport.EngineHealth), messages.EngineHealth{Header: e.header(), Engine: e.id, URL: e.id,
		Healthy: true, Paused: e.paused, Updating: e.updating})
}

func (e *engineNode) sendAck() {
	e.w.send(e.bus, e.subject(transport.EngineAck), messages.EngineVersionAck{Header: e.header(), Engine: e.id, URL: e.id})
}

func (e *engineNode) sendLoadReport() {
	st := e.sched.Stats()
	m := messages.EngineLoad{Header: e.header(), Engine: e.id, URL: e.id, Running: int32(st.Running),
		Waiting: int32(st.Waiting), KVUsage: st.KVUsage}
	if e.frozen > 0 {
		if e.frozenLoad == nil {
			e.frozenLoad = &m
		}
		m = *e.frozenLoad // stale metrics: the scrape keeps returning an old sample
	}
	e.w.send(e.bus, e.subject(transport.EngineLoad), m)
}

func (e *engineNode) onTurn(m messages.TurnRequest) {
	w := e.w
	if e.down > 0 {
		w.logf("%s is down: request %s/%d lost", e.id, m.TrajectoryID, m.TurnIndex)
		return
	}
	// Ground truth: the router's minimum version at routing time never
	// exceeds what this engine serves (the router only learns versions
	// from this engine's own acks, and they only increase).
	if m.Version > e.serving {
		w.fail(InvRouting, "engine %s serving version %d received %s/%d routed under minimum version %d", e.id, e.serving, m.TrajectoryID, m.TurnIndex, m.Version)
		return
	}
	e.nextID++
	if err := e.sched.Add(latency.Request{ID: e.nextID, Prompt: m.Tokens, MaxTokens: int(m.MaxTokens)}); err != nil {
		w.logf("%s rejected %s/%d: %v", e.id, m.TrajectoryID, m.TurnIndex, err)
		return
	}
	e.reqs[e.nextID] = &engineReq{traj: m.TrajectoryID, turn: m.TurnIndex, max: int(m.MaxTokens)}
	e.kick()
}

// kick schedules the next engine step if the engine can run one.
func (e *engineNode) kick() {
	if e.down > 0 || e.hung > 0 || e.updating || e.paused || e.stepping {
		return
	}
	plan := e.sched.Schedule()
	if len(plan.Emits) == 0 {
		return
	}
	ids := make([]uint64, len(plan.Emits))
	for i, em := range plan.Emits {
		ids[i] = em.ID
	}
	e.stepping = true
	inc := e.inc
	d := plan.Duration
	if e.slow > 0 {
		d *= 10
	}
	e.w.afterRoutine(d, e.id+" step batch="+strconv.Itoa(len(ids)), func() {
		if e.inc == inc {
			e.completeStep(ids)
		}
	})
}

func (e *engineNode) completeStep(ids []uint64) {
	if e.hung > 0 {
		e.stalled = func() { e.completeStep(ids) }
		return
	}
	e.stepping = false
	for _, id := range ids {
		r := e.reqs[id]
		if r == nil {
			continue
		}
		tok := int32(1 + e.w.rng.Intn(60))
		e.sched.Append(id, tok)
		r.out = append(r.out, tok)
		r.versions = append(r.versions, int32(e.serving))
		if len(r.out) >= r.max {
			e.sched.Finish(id)
			delete(e.reqs, id)
			e.w.send(e.bus, subjTurnResults, messages.TurnResult{
				Header: e.header(), TrajectoryID: r.traj, TurnIndex: r.turn, Engine: e.id, Tokens: r.out,
				FinishReason: "length", ServingVersion: e.serving, TokenVersions: r.versions})
		}
	}
	e.kick()
}

// onLoad hands a LoadWeights to the engine's agent: acked again when the
// agent says so (a repeated command whose ack was lost), else dispatched
// (targets coalesce: an update in progress goes on to the newest target
// once it is done, as the real agent does).
func (e *engineNode) onLoad(m messages.LoadWeights) {
	if e.down > 0 || e.hung > 0 {
		return
	}
	if _, ok := e.agent.Reack(m.Version); ok {
		e.sendAck()
		return
	}
	if m.Version > e.cmd.Version || e.cmd.Engine == "" {
		e.cmd = m
	}
	e.agent.Dispatch(m.Version)
	e.load()
}

// load starts the agent's next target, if it has one and no update runs:
// the engine stops stepping (updating), fetches the chain of versions,
// verifies each checksum, and serves the newest one that verified.
func (e *engineNode) load() {
	w := e.w
	target, ok := e.agent.Next()
	if !ok || e.updating {
		return
	}
	first := e.serving + 1
	if m := e.cmd; m.Version == target && m.Format == messages.WeightsFull && m.BaseVersion > e.serving {
		first = m.BaseVersion
	}
	var bytes int64
	for v := first; v <= target; v++ {
		if sv := w.store.versions[v]; sv != nil {
			bytes += sv.deltaBytes
		}
	}
	e.updating = true
	e.sendHealth()
	inc := e.inc
	d := 20*msec + time.Duration(bytes/(20<<20)*int64(time.Second)) + time.Duration(bytes%(20<<20))*time.Second/(20<<20)
	w.after(d, fmt.Sprintf("%s fetched versions %d..%d", e.id, first, target), func() {
		if e.inc == inc {
			e.apply(first, target)
		}
	})
}

func (e *engineNode) apply(first, last int64) {
	w := e.w
	out := targets.Loaded
	for v := first; v <= last; v++ {
		if !w.store.committed(v) {
			w.logf("%s: version %d has no manifest: not visible, stop", e.id, v)
			out = targets.Failed
			break
		}
		p := w.store.versions[v].payload
		if e.corrupt > 0 && w.rng.Intn(2) == 0 {
			p = append([]byte(nil), p...)
			p[w.rng.Intn(len(p))] ^= 0x40
		}
		sum := checksumOf(p)
		if sum != w.store.checksum(v) {
			w.logf("%s: version %d checksum mismatch (%s != %s)", e.id, v, short(sum), short(w.store.checksum(v)))
			if !w.cfg.has(BugEngineSkipsChecksum) {
				out = targets.Failed
				break // keep serving the last good version; the publisher resends
			}
		}
		e.serving, e.loadedSum = v, sum
	}
	e.agent.Handled(last, out)
	e.updating = false
	e.sched.ResetPrefixCache()
	e.sendHealth()
	e.sendAck()
	e.load() // a newer target dispatched meanwhile
	e.kick()
}

func (e *engineNode) crash() {
	e.down++
	e.inc++
	e.sched = latency.New(latencyConfig())
	e.reqs = map[uint64]*engineReq{}
	e.stepping, e.updating, e.paused, e.stalled = false, false, false, nil
}

// restart brings a crashed engine back with the weights it had on disk,
// paused for a short warm-up.
func (e *engineNode) restart() {
	e.down--
	if e.down > 0 {
		return
	}
	e.paused = true
	if e.w.cfg.has(BugEngineRestartsFromBase) {
		e.serving, e.loadedSum = 0, e.w.store.checksum(0)
	}
	// The agent starts again at what the engine holds on disk.
	e.agent, e.cmd = targets.New(e.serving), messages.LoadWeights{}
	e.sendHealth()
	inc := e.inc
	e.w.after(200*msec, e.id+" warm", func() {
		if e.inc == inc && e.down == 0 {
			e.paused = false
			e.sendHealth()
			e.sendAck()
			e.kick()
		}
	})
}

func (e *engineNode) unhang() {
	e.hung--
	if e.hung > 0 {
		return
	}
	if f := e.stalled; f != nil {
		e.stalled = nil
		f()
	} else {
		e.kick()
	}
}
