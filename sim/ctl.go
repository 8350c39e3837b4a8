package sim

import (
	"fmt"
	"strconv"
	"time"

	"github.com/asyncrl/asyncrl/actors/controller"
	"github.com/asyncrl/asyncrl/actors/filter"
	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/actors/sampling"
	"github.com/asyncrl/asyncrl/cluster/termwatch"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/memhub"
)

// Rollout timing (virtual).
const (
	turnTimeout   = 3 * time.Second // a turn with no result is retried elsewhere
	maxTimeouts   = 4               // then the episode, and its group, is aborted
	routeBackoff  = 100 * msec      // retry when no engine may take a request
	envDelay      = 10 * msec       // the environment's turn between two generations
	healthTimeout = time.Second     // no heartbeat for this long: unhealthy
	retransmit    = 1500 * msec     // a TrainBatch without StepDone is sent again
	envTokens     = 4               // tokens the environment appends per turn
	promptBase    = 16              // prompt length is promptBase + i%32
	healthSweep   = heartbeatEvery  // how often silence is checked
)

// Subjects of the router shell: engines send TurnResults and announce
// health and load.
var (
	subjTurnResults = plan.TurnResults
	subjHealthAll   = plan.EngineKindAll(transport.EngineHealth)
	subjLoadAll     = plan.EngineKindAll(transport.EngineLoad)
)

// turnSubjects are the engines' turn subjects (engines are e0..e15).
var turnSubjects = func() map[string]string {
	m := map[string]string{}
	for i := range 16 {
		id := "e" + strconv.Itoa(i)
		m[id] = must(plan.Turn(id))
	}
	return m
}()

// turnSubject is the subject engine's turn requests go to.
func turnSubject(engine string) string {
	if s, ok := turnSubjects[engine]; ok {
		return s
	}
	return must(plan.Turn(engine))
}

// engineKnow is what the router shell has been told about an engine.
type engineKnow struct {
	state     policy.State
	version   int64
	lastHeard time.Duration
}

// ctlNode is the control node. Its decisions are the real cores': the
// controller core (actors/controller: prompt queue, staleness controller,
// mini-batch assembly, ledger entries, requeues, TrainBatch resends), the
// sampling core (actors/sampling over actors/filter) and the routing core
// (actors/router/policy). ctlNode is their shell, as the actor shells are
// in production: it steps them with the messages the simulated rollouts,
// trainer, engines and publisher produce, and carries out their effects —
// a PromptAssigned starts a group's rollout (one turn at a time through
// the router), a TrainBatch goes to the trainer over the hub, a ledger
// entry is written to the durable ledger (ledger.go), the resend timer
// runs on the virtual clock. It talks to engines, trainer and publisher
// over the hub only.
type ctlNode struct {
	w    *world
	bus  *memhub.Bus
	core *controller.Core
	smp  *sampling.Core
	rt   *policy.Core

	// src is the dataset cursor (durable: a restart does not hand out
	// the same fresh prompts again); led is the durable prompt ledger,
	// written from the core's PromptLedger and TrainBatch effects.
	src *promptSource
	led *ctlLedger
	// timers: the core's armed timers, by name → arming generation.
	timers map[string]int

	groups     map[string]*rgroup // groups being rolled out
	trajs      map[string]*rtraj
	know       map[string]*engineKnow
	minVersion int64

	// Crash and recovery. The ledger is durable (JetStream in the real
	// system), written through on every transition; everything else is
	// lost in a crash, the cores included.
	down       int
	inc        int
	recovering bool // restarted: routes nothing until the first MinVersionSet

	// The term (term.go): its trajectory buffer and the termwatch core
	// that decides when the term steps down. A restart is a new term with
	// a fresh buffer and watch.
	buf   *trajBuffer
	watch *termwatch.Watch
	// batches holds the kept groups' token batches the control messages
	// reference (ctlrefs.go); it survives a crash.
	batches *batchStore
	// Counts for the summary: terms that stepped down (and of them for
	// no step), unreplicated buffers lost, groups lost with them.
	stepDowns, noStepDowns, buffersLost, lostGroups int
	// The retired incarnations' counters (inputs.go: retire): the
	// controller core's, the staleness violations and future versions
	// it counted, the sampling core's verdicts.
	totals                     coreTotals
	violations, futureVersions int64
	byReason                   map[filter.Reason]int64
	invalid                    int64
}

func newCtl(w *world) (*ctlNode, error) {
	c := &ctlNode{w: w, bus: w.hub.Connect("ctl"), src: &promptSource{}, led: newLedger(), byReason: map[filter.Reason]int64{},
		batches: newBatchStore()}
	smp, err := sampling.New(sampling.Config{Filter: c.filterConfig(), RunID: runID, Sender: "ctl",
		Kept: subjKept, Filtered: subjFiltered})
	if err != nil {
		return nil, err
	}
	core, err := controller.New(c.coreConfig(), c.src)
	if err != nil {
		return nil, err
	}
	c.smp, c.core, c.timers = smp, core, map[string]int{}
	return c, c.newRouter()
}

// newRouter starts the router shell from nothing: a fresh routing core,
// every engine unknown (version 0, heard now).
func (c *ctlNode) newRouter() error {
	w := c.w
	rt, err := policy.New(w.in.router, w.rng)
	if err != nil {
		return err
	}
	c.rt, c.know = rt, map[string]*engineKnow{}
	c.groups, c.trajs = map[string]*rgroup{}, map[string]*rtraj{}
	for i := 0; i < w.wl.Engines; i++ {
		id := fmt.Sprintf("e%d", i)
		if err := rt.Step(c.t(), policy.AddReplica{URL: id}); err != nil {
			return err
		}
		c.know[id] = &engineKnow{state: policy.Active, lastHeard: w.now()}
	}
	return nil
}

// after is w.after for this incarnation of the controller: a timer set
// before a crash does nothing.
func (c *ctlNode) after(d time.Duration, label string, fn func()) {
	inc := c.inc
	c.w.after(d, label, func() {
		if c.inc == inc && c.down == 0 {
			fn()
		}
	})
}

// on wraps a handler so that a crashed controller receives nothing.
func (c *ctlNode) on(h func(messages.Message)) func(messages.Message) {
	return func(m messages.Message) {
		if c.down == 0 {
			h(m)
		}
	}
}

// crash loses everything but the durable ledger.
func (c *ctlNode) crash() {
	if c.down == 0 {
		c.retire()
	}
	c.down++
	c.inc++
}

// restart recovers from the ledger (ledger.go: recovery): a new
// controller core resumes at the step after the last acknowledged one, or
// at the in-flight batch's step, which it sends again; every other
// admitted, unsettled group is requeued by the core; the router starts
// blind and routes nothing until the publisher's minimum version arrives.
func (c *ctlNode) restart() {
	c.down--
	if c.down > 0 {
		return
	}
	w := c.w
	r, err := c.recovery()
	if err != nil {
		w.fail(InvProtocol, "ctl: ledger: %v", err)
		return
	}
	core, err := controller.Resume(c.coreConfig(), c.src, r)
	if err != nil {
		w.fail(InvProtocol, "controller: resume: %v", err)
		return
	}
	smp, err := sampling.New(sampling.Config{Filter: c.filterConfig(), RunID: runID, Sender: "ctl",
		Kept: subjKept, Filtered: subjFiltered})
	if err != nil {
		w.fail(InvProtocol, "sampling: %v", err)
		return
	}
	c.core, c.smp, c.timers = core, smp, map[string]int{}
	c.minVersion, c.recovering = 0, true
	if err := c.newRouter(); err != nil {
		w.fail(InvProtocol, "router: %v", err)
		return
	}
	old := c.buf
	c.startTerm()
	w.logf("ctl: recovered at step %d (batch in flight: %v), %d groups to requeue", r.Step, r.InFlight != nil, len(r.Lost))
	for _, f := range old.lostBy {
		w.faults.end(w, f) // the lost buffer is replaced: that fault has healed
	}
	c.sweep()
	c.core.Start(c.t())
	c.apply(c.core.Drain())
}

func (c *ctlNode) t() time.Time { return c.w.hub.Now() }

func (c *ctlNode) start() {
	w := c.w
	w.subscribe(c.bus, subjTurnResults, c.on(func(m messages.Message) {
		if r, ok := m.(messages.TurnResult); ok {
			c.onResult(r)
		}
	}))
	w.subscribe(c.bus, subjHealthAll, c.on(func(m messages.Message) {
		if h, ok := m.(messages.EngineHealth); ok {
			c.onHealth(h)
		}
	}))
	w.subscribe(c.bus, subjLoadAll, c.on(func(m messages.Message) {
		if l, ok := m.(messages.EngineLoad); ok {
			c.change(policy.ObserveMetrics{URL: l.Engine, Queue: int(l.Waiting), KVUsage: l.KVUsage})
		}
	}))
	w.subscribe(c.bus, subjAcks, c.on(func(m messages.Message) {
		if a, ok := m.(messages.EngineVersionAck); ok {
			if k := c.know[a.Engine]; k != nil && a.Version > k.version {
				k.version = a.Version
				c.change(policy.SetVersion{URL: a.Engine, Version: a.Version})
			}
		}
	}))
	w.subscribe(c.bus, subjSteps, c.on(func(m messages.Message) {
		if sd, ok := m.(messages.StepDone); ok {
			c.onStepDone(sd)
		}
	}))
	w.subscribe(c.bus, subjMinVersion, c.on(func(m messages.Message) {
		mv, ok := m.(messages.MinVersionSet)
		if !ok {
			return
		}
		if mv.MinVersion > c.minVersion {
			c.minVersion = mv.MinVersion
			if !w.cfg.has(BugRouterIgnoresGating) {
				c.change(policy.RaiseMinVersion{Version: mv.MinVersion})
			}
		}
		if c.recovering {
			c.recovering = false
			w.logf("ctl: minimum version %d known: routing again", c.minVersion)
		}
	}))
	c.startTerm()
	c.sweep()
	c.after(0, "ctl: start", func() {
		c.core.Start(c.t())
		c.apply(c.core.Drain())
	})
}

func (c *ctlNode) onHealth(h messages.EngineHealth) {
	k := c.know[h.Engine]
	if k == nil {
		return
	}
	k.lastHeard = c.w.now()
	k.state = policy.Active
	switch {
	case h.Updating:
		k.state = policy.Updating
	case h.Paused:
		k.state = policy.Paused
	}
	if c.w.cfg.has(BugRouterIgnoresGating) {
		c.change(policy.SetState{URL: h.Engine, State: policy.Active})
	} else {
		c.change(policy.SetState{URL: h.Engine, State: k.state})
	}
	if h.Healthy {
		if changed, _ := c.rt.ObserveHealth(h.Engine, true, true); changed {
			c.w.logf("ctl: %s healthy again", h.Engine)
		}
	}
}

// sweep marks engines that went silent unhealthy.
func (c *ctlNode) sweep() {
	c.after(healthSweep, "", func() {
		now := c.w.now()
		for _, rv := range c.rt.Replicas() {
			if k := c.know[rv.URL]; rv.Healthy && now-k.lastHeard > healthTimeout {
				c.change(policy.SetHealth{URL: rv.URL, Healthy: false})
				c.w.logf("ctl: %s silent for %v: unhealthy", rv.URL, (now - k.lastHeard).Round(msec))
			}
		}
		c.sweep()
	})
}

// ---- rollout: a PromptAssigned starts a group -----------------------------

// ---- rollout: one turn at a time through the router core -------------------
