package sim

import (
	"fmt"
	"math/rand"
	"sort"
	"time"

	"github.com/asyncrl/asyncrl/transport/memhub"
)

// FaultKind names a fault the seed can draw.
type FaultKind string

// Fault kinds. Each is an episode with a start and a duration; at its end
// the fault heals (the engine restarts, the partition heals, the rule is
// removed).
const (
	FaultEngineCrash    FaultKind = "engine-crash"     // engine process dies; restarts at the end with its weights
	FaultEngineRestart  FaultKind = "engine-restart"   // a crash with a quick restart
	FaultEngineHang     FaultKind = "engine-hang"      // engine stops stepping and reporting
	FaultEngineSlowdown FaultKind = "engine-slowdown"  // every engine step takes 10× longer
	FaultStaleMetrics   FaultKind = "stale-metrics"    // the engine's load scrape keeps returning an old sample
	FaultCorruptDelta   FaultKind = "corrupt-delta"    // fetched weights fail their checksum half of the time
	FaultTrainerCrash   FaultKind = "trainer-crash"    // trainer dies; restarts from its durable state
	FaultPublisherCrash FaultKind = "publisher-crash"  // publisher dies between a payload and its manifest
	FaultCtlCrash       FaultKind = "controller-crash" // controller dies; recovers from its durable ledger
	FaultMsgDrop        FaultKind = "msg-drop"         // hub drops matching deliveries
	FaultMsgDuplicate   FaultKind = "msg-duplicate"    // hub delivers matching messages twice
	FaultMsgDelay       FaultKind = "msg-delay"        // hub delays matching deliveries
	FaultMsgReorder     FaultKind = "msg-reorder"      // hub shuffles matching deliveries in windows
	FaultPartition      FaultKind = "partition"        // nodes split into groups that cannot talk
	// FaultStreamLoss: the server holding the controller's trajectory
	// buffer dies. Replicated (drawn per fault): the buffer has no leader
	// for a 4–9 s election, then works again, nothing lost. Unreplicated:
	// the buffered groups are lost and every store fails until a new term
	// replaces the buffer — the fault heals then (see ctlNode.probe).
	FaultStreamLoss FaultKind = "stream-loss"
	// FaultEngineLeave: an engine is taken out of the fleet (the
	// publisher forgets it, the router removes its replica and sessions)
	// and added back at the end, with the weights it had (issue 37;
	// drawn from the second stream, inputs.go).
	FaultEngineLeave FaultKind = "engine-leave"
	// FaultFleetOutage: every engine leaves the fleet at once (a rack's
	// power, a cluster-wide driver upgrade) and comes back at the end:
	// each publish meanwhile settles with no engine to serve it, so the
	// trainer's publish fails and its step rule tries it again — until
	// the outage ends, or past publisher.attempts tries it gives up
	// (drawn from a third stream, trainer_check.go).
	FaultFleetOutage FaultKind = "fleet-outage"

	// Faults of the failover scenario (failover_check.go).

	// FaultHolderKill: the trainer-lease holder is killed (its core, its
	// elector and its pipeline stop); it restarts, as a standby, at the end.
	FaultHolderKill FaultKind = "holder-kill"
	// FaultRolloutKill: a rollout node dies with its groups in flight (and
	// its engine); it restarts at the end.
	FaultRolloutKill FaultKind = "rollout-node-kill"
	// FaultLeaseCut: a trainer node cannot reach the lease's KV.
	FaultLeaseCut FaultKind = "lease-partition"
	// FaultStoreCut: a trainer node cannot reach the progress store (its
	// claims and saves wait, then fail).
	FaultStoreCut FaultKind = "store-partition"
	// FaultZombie: the holder is cut from the lease and its elector's
	// notices come seconds late, so it runs on while a standby takes over.
	FaultZombie FaultKind = "zombie-holder"
	// FaultLossy: LoadWeights, their acks and periodic rollout statuses are
	// lost, duplicated or delayed.
	FaultLossy FaultKind = "lossy-messages"
	// FaultLedgerElection: the server that led the durable prompt
	// ledger's stream died; for 4–9 s its followers answer reads and
	// every write waits for the new leader (issue 37). A rollout node's
	// kill brings one too when its server led the stream (drawn).
	FaultLedgerElection FaultKind = "ledger-election"
	// FaultStartStall: a term claimed meanwhile never starts (its start
	// hangs: no router, its engines never load version 0), even after the
	// fault ends — until its watch steps it down (issue 37).
	FaultStartStall FaultKind = "start-stall"
)

// FaultKinds lists every kind, for summaries.
var FaultKinds = []FaultKind{FaultEngineCrash, FaultEngineRestart, FaultEngineHang, FaultEngineSlowdown,
	FaultStaleMetrics, FaultCorruptDelta, FaultTrainerCrash, FaultPublisherCrash, FaultCtlCrash, FaultMsgDrop,
	FaultMsgDuplicate, FaultMsgDelay, FaultMsgReorder, FaultPartition, FaultStreamLoss, FaultEngineLeave,
	FaultHolderKill, FaultRolloutKill, FaultLeaseCut, FaultStoreCut, FaultZombie, FaultLossy, FaultLedgerElection, FaultStartStall,
	FaultQuorumLoss, FaultNodeStop, FaultPipelineFail, FaultStreamOutage, FaultCheckpointLost, FaultMirrorLag, FaultEngineSwap, FaultFleetOutage,
	FaultBucketOutage}

var processFaults = []FaultKind{FaultEngineCrash, FaultEngineRestart, FaultEngineHang, FaultEngineSlowdown,
	FaultStaleMetrics, FaultCorruptDelta, FaultTrainerCrash, FaultPublisherCrash, FaultCtlCrash, FaultStreamLoss}

var msgFaults = []FaultKind{FaultMsgDrop, FaultMsgDuplicate, FaultMsgDelay, FaultMsgReorder}

// faultTarget is a class of messages a message fault strikes, named in
// the fault's description.
type faultTarget struct {
	name string
	sel  memhub.Selector
}

// faultTargets are the classes message faults pick from: the turns, the
// engines' announcements, StepDone, TrainBatch, the weight publisher's
// messages (MinVersionSet, LoadWeights: every message of node "pub") and
// everything.
var faultTargets = []faultTarget{{plan.TurnsAll, memhub.Selector{Subject: plan.TurnsAll}},
	{plan.EnginesAll, memhub.Selector{Subject: plan.EnginesAll}}, {plan.Steps, memhub.Selector{Subject: plan.Steps}},
	{plan.Train, memhub.Selector{Subject: plan.Train}}, {"from pub", memhub.Selector{From: []string{"pub"}}},
	{">", memhub.Selector{Subject: ">"}}}

// fault is one drawn episode.
type fault struct {
	idx     int
	kind    FaultKind
	at, dur time.Duration
	engine  int
	target  faultTarget
	prob    float64
	delay   time.Duration
	groups  [][]string
	// replicated: a stream-loss fault's buffer had replicas (an election)
	// rather than none (lost); buf is the buffer it struck.
	replicated bool
	buf        *trajBuffer

	enabled, started, ended bool
	rule                    memhub.FaultID
}

func (f *fault) String() string {
	s := fmt.Sprintf("#%d %s at %.3fs for %v", f.idx, f.kind, f.at.Seconds(), f.dur)
	switch f.kind {
	case FaultEngineCrash, FaultEngineRestart, FaultEngineHang, FaultEngineSlowdown, FaultStaleMetrics, FaultCorruptDelta, FaultEngineLeave:
		s += fmt.Sprintf(" on e%d", f.engine)
	case FaultMsgDrop, FaultMsgDuplicate, FaultMsgDelay, FaultMsgReorder:
		s += fmt.Sprintf(" on %s p=%.2f", f.target.name, f.prob)
		if f.delay > 0 {
			s += fmt.Sprintf(" up to %v", f.delay)
		}
	case FaultPartition:
		s += fmt.Sprintf(" %v", f.groups)
	case FaultStreamLoss:
		if f.replicated {
			s = fmt.Sprintf("#%d %s at %.3fs: replicated buffer, leader election for %v", f.idx, f.kind, f.at.Seconds(), f.dur)
		} else {
			s = fmt.Sprintf("#%d %s at %.3fs: unreplicated buffer lost until the term is replaced", f.idx, f.kind, f.at.Seconds())
		}
	}
	return s
}

// faultPlan is the run's fault schedule and what is active now.
type faultPlan struct {
	faults   []*fault
	active   int
	lastHeal time.Duration
	injected map[FaultKind]int
	reorders int
}

// drawFaults draws the whole schedule up front from the run's rng, so
// masking faults out (delta debugging) does not shift the random stream
// the schedule itself came from.
func drawFaults(rng *rand.Rand, cfg Config, wl workload) *faultPlan {
	d := &faultDrawer{rng: rng, cfg: cfg, wl: wl, p: &faultPlan{injected: map[FaultKind]int{}}}
	switch cfg.Scenario {
	case ScenarioFaults:
		d.processes(6 + rng.Intn(10))
	case ScenarioPartitions:
		d.partitions(2 + rng.Intn(4))
		for i, m := 0, rng.Intn(3); i < m; i++ {
			d.msgFault()
		}
	case ScenarioMixed:
		d.processes(4 + rng.Intn(8))
		d.partitions(1 + rng.Intn(3))
	}
	return d.p
}

// faultDrawer draws one run's fault schedule into p. Its methods draw from
// rng in the order they are called: that order is the seeds' meaning.
type faultDrawer struct {
	rng *rand.Rand
	cfg Config
	wl  workload
	p   *faultPlan
}

func (d *faultDrawer) at() time.Duration {
	return 500*msec + time.Duration(d.rng.Int63n(int64(d.wl.Horizon)))
}

func (d *faultDrawer) dur(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(d.rng.Int63n(int64(hi-lo)))
}

func (d *faultDrawer) add(f *fault) {
	p, cfg := d.p, d.cfg
	f.idx = len(p.faults)
	f.enabled = cfg.faultMask == nil || (f.idx < len(cfg.faultMask) && cfg.faultMask[f.idx])
	p.faults = append(p.faults, f)
}

func (d *faultDrawer) msgFault() {
	rng := d.rng
	f := &fault{kind: msgFaults[rng.Intn(len(msgFaults))], at: d.at(), dur: d.dur(500*msec, 4*time.Second),
		target: faultTargets[rng.Intn(len(faultTargets))], prob: 0.1 + 0.8*rng.Float64()}
	if f.kind == FaultMsgDelay {
		f.delay = d.dur(100*msec, time.Second)
	}
	d.add(f)
}

// processes draws n process faults (and, in some seeds, message faults
// among them).
func (d *faultDrawer) processes(n int) {
	rng := d.rng
	// Swarm testing: each seed enables a random subset of the kinds,
	// so a fault that masks another (a crash hiding a hang) is often
	// absent, and each kind gets runs where it dominates.
	var kinds []FaultKind
	for _, k := range processFaults {
		if rng.Intn(2) == 0 {
			kinds = append(kinds, k)
		}
	}
	msgs := rng.Intn(3) != 0
	if len(kinds) == 0 {
		kinds = append(kinds, processFaults[rng.Intn(len(processFaults))])
	}
	for i := 0; i < n; i++ {
		if msgs && rng.Intn(3) == 0 {
			d.msgFault()
			continue
		}
		d.processFault(kinds)
	}
}

// processFault draws one fault of one of kinds on one engine.
func (d *faultDrawer) processFault(kinds []FaultKind) {
	rng := d.rng
	f := &fault{kind: kinds[rng.Intn(len(kinds))], at: d.at(), engine: rng.Intn(d.wl.Engines)}
	switch f.kind {
	case FaultEngineRestart:
		f.dur = d.dur(50*msec, 300*msec)
	case FaultEngineSlowdown, FaultStaleMetrics:
		f.dur = d.dur(time.Second, 5*time.Second)
	case FaultStreamLoss:
		// A JetStream leader election takes 4–9 s; a buffer
		// without replicas stays lost until a new term.
		if f.replicated = rng.Intn(2) == 0; f.replicated {
			f.dur = d.dur(4*time.Second, 9*time.Second)
		}
	default:
		f.dur = d.dur(300*msec, 4*time.Second)
	}
	d.add(f)
}

// partitions draws n partitions, laid out one after another: a new one
// replaces the old in the hub.
func (d *faultDrawer) partitions(n int) {
	rng, wl := d.rng, d.wl
	nodes := []string{"ctl", "trainer", "pub"}
	for i := 0; i < wl.Engines; i++ {
		nodes = append(nodes, fmt.Sprintf("e%d", i))
	}
	t := 500 * msec
	for i := 0; i < n; i++ {
		t += time.Duration(rng.Int63n(int64(wl.Horizon) / int64(n)))
		f := &fault{kind: FaultPartition, at: t, dur: d.dur(300*msec, 4*time.Second)}
		f.groups = d.partitionGroups(nodes)
		t += f.dur
		d.add(f)
	}
}

// partitionGroups splits nodes in two: one node off the rest, or a random
// cut.
func (d *faultDrawer) partitionGroups(nodes []string) [][]string {
	rng := d.rng
	if rng.Intn(2) == 0 {
		k := rng.Intn(len(nodes))
		rest := append(append([]string(nil), nodes[:k]...), nodes[k+1:]...)
		return [][]string{{nodes[k]}, rest}
	}
	perm := rng.Perm(len(nodes))
	cut := 1 + rng.Intn(len(nodes)-1)
	var a, b []string
	for j, pi := range perm {
		if j < cut {
			a = append(a, nodes[pi])
		} else {
			b = append(b, nodes[pi])
		}
	}
	sort.Strings(a)
	sort.Strings(b)
	return [][]string{a, b}
}

// schedule sets a timer for every enabled fault's start.
func (p *faultPlan) schedule(w *world) {
	for _, f := range p.faults {
		if !f.enabled {
			continue
		}
		w.after(f.at, "", func() { p.start(w, f) })
	}
}

func (p *faultPlan) start(w *world, f *fault) {
	if w.finished || f.started {
		return
	}
	f.started = true
	p.active++
	if f.kind != FaultPublisherCrash {
		p.injected[f.kind]++ // a publisher crash counts when it strikes
	}
	w.logf("FAULT start %s", f)
	e := func() *engineNode { return w.engines[f.engine] }
	switch f.kind {
	case FaultEngineCrash, FaultEngineRestart:
		e().crash()
	case FaultEngineHang:
		e().hung++
	case FaultEngineSlowdown:
		e().slow++
	case FaultStaleMetrics:
		e().frozen++
	case FaultCorruptDelta:
		e().corrupt++
	case FaultTrainerCrash:
		w.trainer.crash()
	case FaultCtlCrash:
		w.ctl.crash()
	case FaultStreamLoss:
		f.buf = w.ctl.buf
		if !f.replicated {
			// Heals when a new term replaces the buffer
			// (ctlNode.restart), or at the end of the run.
			w.ctl.loseBuffer(f)
			return
		}
		f.buf.electing++
	case FaultPublisherCrash:
		// Armed now; strikes at the next publish, between the payload
		// and the manifest, and restarts dur later.
		w.pub.armed = append(w.pub.armed, func() {
			p.injected[f.kind]++
			w.after(f.dur, "", func() { p.end(w, f) })
		})
		return
	case FaultEngineLeave, FaultFleetOutage:
		for _, e := range f.leaving(w) {
			w.engineLeave(e)
		}
	case FaultMsgDrop, FaultMsgDuplicate, FaultMsgDelay, FaultMsgReorder:
		p.startMsgFault(w, f)
	case FaultPartition:
		w.hub.Partition(f.groups...)
	}
	w.after(f.dur, "", func() { p.end(w, f) })
}

// startMsgFault adds a message fault's rule to the hub (the first reorder
// also starts the flush loop).
func (p *faultPlan) startMsgFault(w *world, f *fault) {
	mf := memhub.Fault{Match: f.target.sel, Probability: f.prob}
	switch f.kind {
	case FaultMsgDrop:
		mf.Kind = memhub.Drop
	case FaultMsgDuplicate:
		mf.Kind = memhub.Duplicate
	case FaultMsgDelay:
		mf.Kind, mf.Delay, mf.RandomDelay = memhub.Delay, f.delay, true
	case FaultMsgReorder:
		mf.Kind, mf.Window = memhub.Reorder, 3
		p.reorders++
		if p.reorders == 1 {
			p.flushLoop(w)
		}
	}
	id, err := w.hub.AddFault(mf)
	if err != nil {
		panic(fmt.Sprintf("sim: %v", err))
	}
	f.rule = id
}

// flushLoop releases partial reorder windows every 100 ms while a reorder
// fault is active, so a quiet subject is not held forever.
func (p *faultPlan) flushLoop(w *world) {
	w.after(100*msec, "", func() {
		w.hub.Flush()
		if p.reorders > 0 {
			p.flushLoop(w)
		}
	})
}

func (p *faultPlan) end(w *world, f *fault) {
	if !f.started || f.ended {
		return
	}
	f.ended = true
	p.active--
	p.lastHeal = w.now()
	w.logf("FAULT end %s", f)
	e := func() *engineNode { return w.engines[f.engine] }
	switch f.kind {
	case FaultEngineCrash, FaultEngineRestart:
		e().restart()
	case FaultEngineHang:
		e().unhang()
	case FaultEngineSlowdown:
		e().slow--
	case FaultStaleMetrics:
		if e().frozen--; e().frozen == 0 {
			e().frozenLoad = nil
		}
	case FaultCorruptDelta:
		e().corrupt--
	case FaultTrainerCrash:
		w.trainer.restart()
	case FaultCtlCrash:
		w.ctl.restart()
	case FaultEngineLeave, FaultFleetOutage:
		for _, e := range f.leaving(w) {
			w.engineBack(e)
		}
	case FaultStreamLoss:
		if f.replicated {
			f.buf.electing-- // a replaced buffer is unaffected: the new term has its own
		}
	case FaultPublisherCrash:
		if w.pub.down > 0 {
			w.pub.restart()
		}
	case FaultMsgDrop, FaultMsgDuplicate, FaultMsgDelay, FaultMsgReorder:
		w.hub.RemoveFault(f.rule)
		if f.kind == FaultMsgReorder {
			p.reorders--
			w.hub.Flush()
		}
	case FaultPartition:
		w.hub.Heal()
	}
}

// healAll ends every active fault now (the run's last step is done).
func (p *faultPlan) healAll(w *world) {
	w.pub.armed = nil
	for _, f := range p.faults {
		if f.started && !f.ended {
			p.end(w, f)
		}
	}
}

// enabledList describes the enabled faults, in schedule order.
func (p *faultPlan) enabledList() []string {
	var out []string
	for _, f := range p.faults {
		if f.enabled {
			out = append(out, f.String())
		}
	}
	return out
}
