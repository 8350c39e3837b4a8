package sim

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/asyncrl/asyncrl/actors/filter"
	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/actors/staleness"
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
	subjResults   = "asyncrl.sim.turns.results"
	subjHealthAll = "asyncrl.sim.engines.*.health"
	subjLoadAll   = "asyncrl.sim.engines.*.load"
)

// engineKnow is what the router shell has been told about an engine.
type engineKnow struct {
	state     policy.State
	version   int64
	lastHeard time.Duration
}

type rgroup struct {
	// id names the group everywhere outside the staleness controller;
	// cid is the controller's own id. They differ after a restart: the
	// resumed controller numbers admissions from 1 again, so its ids
	// would repeat ones already in the ledger (see restart).
	id, cid string
	prompt  string
	trajs   []*rtraj
	done    int
	p       float64 // probability a trajectory is rewarded
	aborted bool
}

type rtraj struct {
	id       string
	g        *rgroup
	turns    int
	turn     int
	ctx      []int32 // prompt, generated and environment tokens
	vers     []int32 // policy version per token (0 for prompt/env tokens)
	mask     []uint8 // loss mask: 1 for generated tokens
	promptN  int
	maxTok   []int
	inflight bool
	engine   string
	charged  int64
	seq      int
	timeouts int
	avoid    []string
	minV     int64
	reward   float64
}

// ctlNode is the control node: prompt source, rollout scheduler, router
// shell over the routing core, staleness controller and dynamic-sampling
// filter. It talks to engines, trainer and publisher over the hub only.
type ctlNode struct {
	w    *world
	bus  *memhub.Bus
	st   *staleness.Controller
	filt filter.Config
	rt   *policy.Core

	source     []string // requeued prompts, served first
	nextPrompt int
	groups     map[string]*rgroup
	trajs      map[string]*rtraj
	pending    []*rgroup // accepted and kept, waiting for a batch
	batch      []*rgroup
	batchData  []byte // the batch's Arrow IPC stream, kept for retransmission
	batchSent  bool
	batchStep  int64
	stepsDone  int64
	know       map[string]*engineKnow
	minVersion int64

	// Crash and recovery. The controller's ledger — the prompt source,
	// the groups admitted and not settled, the batch sent and its step —
	// is durable (JetStream in the real system), written through on every
	// transition; everything else is lost in a crash.
	down       int
	inc        int
	recovering bool  // restarted: routes nothing until the first MinVersionSet
	awaitStep  int64 // a batch sent before the crash, still unacknowledged

	// The term (term.go): its trajectory buffer, the groups the ledger
	// holds unsettled whose buffered copy was lost, and the termwatch
	// core that decides when the term steps down. A restart is a new
	// term with a fresh buffer and watch.
	buf     *trajBuffer
	orphans []*rgroup
	watch   *termwatch.Watch
	// Counts for the summary: terms that stepped down (and of them for
	// no step), unreplicated buffers lost, groups lost with them.
	stepDowns, noStepDowns, buffersLost, lostGroups int
}

func (w *world) stalenessConfig() staleness.Config {
	return staleness.Config{MaxStalenessSteps: w.wl.S, NumParallelGenerationWorkers: w.wl.W,
		MiniBatchSize: w.wl.B, StalePolicy: staleness.PolicyRequeue, Measure: w.cfg.Measure}
}

func newCtl(w *world) (*ctlNode, error) {
	st, err := staleness.New(w.stalenessConfig())
	if err != nil {
		return nil, err
	}
	fc := filter.DefaultConfig()
	fc.NSamplesPerPrompt = w.wl.N
	if err := fc.Validate(); err != nil {
		return nil, err
	}
	c := &ctlNode{w: w, bus: w.hub.Connect("ctl"), st: st, filt: fc}
	return c, c.newRouter()
}

// newRouter starts the router shell from nothing: a fresh routing core,
// every engine unknown (version 0, heard now).
func (c *ctlNode) newRouter() error {
	w := c.w
	rc := policy.DefaultConfig()
	rc.SweepInterval = 10 * time.Second
	rt, err := policy.New(rc, w.rng)
	if err != nil {
		return err
	}
	c.rt, c.know = rt, map[string]*engineKnow{}
	c.groups, c.trajs = map[string]*rgroup{}, map[string]*rtraj{}
	for i := 0; i < w.wl.Engines; i++ {
		id := fmt.Sprintf("e%d", i)
		if err := rt.AddReplica(id); err != nil {
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
	c.down++
	c.inc++
}

// restart recovers from the ledger: the staleness controller resumes at
// the step after the last acknowledged one (at the in-flight batch's step,
// if one was sent — ResumeInFlight counts its groups as accepted, and its
// StepDone advances the step before the next batch); every other
// admitted, unsettled group is requeued; the router starts blind and
// routes nothing until the publisher's minimum version arrives.
func (c *ctlNode) restart() {
	c.down--
	if c.down > 0 {
		return
	}
	w := c.w
	var lost []*rgroup
	for _, g := range c.groups {
		lost = append(lost, g)
	}
	lost = append(lost, c.pending...)
	lost = append(lost, c.buf.groups...)
	lost = append(lost, c.orphans...)
	c.orphans = nil
	resume := c.stepsDone + 1
	if c.batchSent && w.cfg.has(BugCtlForgetsSentBatch) {
		c.batchSent = false
	}
	resumeAt := staleness.Resume
	if c.batchSent {
		// The batch's step is still the trainer's current step: the
		// staleness controller stays there (its groups counted) and
		// advances on its StepDone, so scheduled staleness is not
		// under-counted for groups admitted meanwhile.
		c.awaitStep = c.batchStep
		resume = c.batchStep
		resumeAt = staleness.ResumeInFlight
	} else {
		lost = append(lost, c.batch...)
		c.batch = nil
	}
	sort.Slice(lost, func(i, j int) bool { return lost[i].id < lost[j].id })
	st, err := resumeAt(w.stalenessConfig(), resume, int64(c.inc))
	if err != nil {
		w.fail(InvProtocol, "staleness: resume: %v", err)
		return
	}
	c.st, c.pending, c.minVersion, c.recovering = st, nil, 0, true
	if err := c.newRouter(); err != nil {
		w.fail(InvProtocol, "router: %v", err)
		return
	}
	old := c.buf
	c.startTerm()
	for _, g := range lost {
		w.logf("ctl: recovery requeues %s", g.id)
		w.orc.settle(g.id, "requeued")
		c.source = append(c.source, g.prompt)
	}
	w.logf("ctl: recovered at step %d (awaiting step %d), %d groups requeued", resume, c.awaitStep, len(lost))
	for _, f := range old.lostBy {
		w.faults.end(w, f) // the lost buffer is replaced: that fault has healed
	}
	c.sweep()
	if c.batchSent {
		c.sendBatch()
	}
}

func (c *ctlNode) t() time.Time { return c.w.hub.Now() }

func (c *ctlNode) start() {
	w := c.w
	w.subscribe(c.bus, subjResults, c.on(func(m messages.Message) {
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
			_ = c.rt.ObserveMetrics(c.t(), l.Engine, int(l.Waiting), l.KVUsage)
		}
	}))
	w.subscribe(c.bus, subjAcks, c.on(func(m messages.Message) {
		if a, ok := m.(messages.EngineVersionAck); ok {
			if k := c.know[a.Engine]; k != nil && a.Version > k.version {
				k.version = a.Version
				_ = c.rt.SetVersion(a.Engine, a.Version)
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
				c.rt.SetMinVersion(mv.MinVersion)
			}
		}
		if c.recovering {
			c.recovering = false
			w.logf("ctl: minimum version %d known: routing again", c.minVersion)
			c.tryBatch()
			c.tryAdmit()
		}
	}))
	c.startTerm()
	c.sweep()
	c.after(0, "ctl: start", c.tryAdmit)
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
		_ = c.rt.SetState(h.Engine, policy.Active)
	} else {
		_ = c.rt.SetState(h.Engine, k.state)
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
				_ = c.rt.SetHealth(rv.URL, false)
				c.w.logf("ctl: %s silent for %v: unhealthy", rv.URL, (now - k.lastHeard).Round(msec))
			}
		}
		c.sweep()
	})
}

// ---- prompt source and admission -----------------------------------------

func (c *ctlNode) peekPrompt() string {
	if len(c.source) > 0 {
		return c.source[0]
	}
	return fmt.Sprintf("p%d", c.nextPrompt)
}

func (c *ctlNode) popPrompt() {
	if len(c.source) > 0 {
		c.source = c.source[1:]
		return
	}
	c.nextPrompt++
}

func promptTokens(p string) []int32 {
	h := policy.Hash64(p)
	n := promptBase + int(h%32)
	toks := make([]int32, n)
	for i := range toks {
		toks[i] = int32(1 + (h>>(uint(i)%56))%60)
	}
	return toks
}

// tryAdmit starts groups while the staleness controller has capacity.
func (c *ctlNode) tryAdmit() {
	w := c.w
	if c.stepsDone >= int64(w.cfg.Steps) || c.recovering {
		return
	}
	for {
		p := c.peekPrompt()
		adm, ok := c.st.TryAcquire(p, c.t())
		if !ok {
			return
		}
		c.popPrompt()
		g := &rgroup{id: adm.GroupID, cid: adm.GroupID, prompt: p}
		w.orc.admit(g.id, p)
		// Some prompts are too easy or too hard (every trajectory scores
		// the same, so the filter drops the group); the rest are mixed.
		switch w.rng.Intn(6) {
		case 0:
			g.p = 0
		case 1:
			g.p = 1
		default:
			g.p = 0.25 + 0.5*w.rng.Float64()
		}
		w.logf("ctl: admit %s (scheduled v%d, capacity now %d)", g.id, adm.ScheduledVersion, c.st.Capacity())
		c.groups[g.id] = g
		for i := 0; i < w.wl.N; i++ {
			t := &rtraj{id: fmt.Sprintf("%s.%d", g.id, i), g: g, turns: 1 + w.rng.Intn(w.wl.MaxTurns),
				ctx: promptTokens(p), minV: math.MaxInt64}
			t.promptN = len(t.ctx)
			t.vers, t.mask = make([]int32, len(t.ctx)), make([]uint8, len(t.ctx))
			for j := 0; j < t.turns; j++ {
				t.maxTok = append(t.maxTok, 4+w.rng.Intn(13))
			}
			g.trajs = append(g.trajs, t)
			c.trajs[t.id] = t
		}
		for _, t := range g.trajs {
			c.routeTurn(t)
		}
	}
}

// ---- rollout: one turn at a time through the router core -------------------

func (c *ctlNode) routeTurn(t *rtraj) {
	w := c.w
	if t.g.aborted || t.inflight {
		return
	}
	if len(t.avoid) >= w.wl.Engines {
		t.avoid = nil
	}
	req := policy.Request{SessionKey: t.id, PromptTokens: len(t.ctx), ExpectedDecodeTokens: t.maxTok[t.turn],
		PrefixHash: policy.Hash64(t.g.prompt), Avoid: t.avoid}
	d := c.rt.Route(c.t(), req)
	if !d.OK() {
		c.after(routeBackoff, "", func() { c.routeTurn(t) })
		return
	}
	c.checkRoute(t, d)
	t.inflight, t.engine, t.charged = true, d.Replica, d.Tokens
	t.seq++
	seq := t.seq
	w.logf("ctl: route %s/%d %s", t.id, t.turn, d)
	w.send(c.bus, transport.MustSubject(runID, transport.TopicTurns, d.Replica), messages.TurnRequest{
		Header:       messages.Header{RunID: runID, Sender: "ctl", Version: c.minVersion},
		TrajectoryID: t.id, GroupID: t.g.id, TurnIndex: int32(t.turn), Engine: d.Replica,
		Tokens: t.ctx, MaxTokens: int32(t.maxTok[t.turn])})
	c.after(turnTimeout, "", func() {
		if t.inflight && t.seq == seq && !t.g.aborted {
			c.onTimeout(t)
		}
	})
}

// checkRoute is the routing invariant, against what the router shell was
// told (state and acked version from the engine, minimum from the
// publisher) and the core's own health view.
func (c *ctlNode) checkRoute(t *rtraj, d policy.Decision) {
	w := c.w
	w.orc.checks++
	k := c.know[d.Replica]
	rv, _ := c.rt.Replica(d.Replica)
	switch {
	case !rv.Healthy:
		w.fail(InvRouting, "%s/%d routed to unhealthy %s", t.id, t.turn, d.Replica)
	case k.state == policy.Paused || k.state == policy.Updating:
		w.fail(InvRouting, "%s/%d routed to %s which reported %s", t.id, t.turn, d.Replica, k.state)
	case k.version < c.minVersion:
		w.fail(InvRouting, "%s/%d routed to %s serving version %d below the minimum %d", t.id, t.turn, d.Replica, k.version, c.minVersion)
	}
}

func (c *ctlNode) onTimeout(t *rtraj) {
	w := c.w
	t.inflight = false
	c.rt.Done(c.t(), t.engine, t.charged)
	_, _ = c.rt.ObserveHealth(t.engine, false, false)
	t.timeouts++
	t.avoid = append(t.avoid, t.engine)
	w.logf("ctl: %s/%d timed out on %s (%d)", t.id, t.turn, t.engine, t.timeouts)
	if t.timeouts >= maxTimeouts {
		c.abortGroup(t.g, "turn timed out "+itoa(int64(t.timeouts))+" times")
		return
	}
	c.routeTurn(t)
}

func versionSpan(r messages.TurnResult) (lo, hi int64) {
	if len(r.TokenVersions) == 0 {
		return r.ServingVersion, r.ServingVersion
	}
	lo, hi = math.MaxInt64, math.MinInt64
	for _, v := range r.TokenVersions {
		lo, hi = min(lo, int64(v)), max(hi, int64(v))
	}
	return lo, hi
}

func (c *ctlNode) onResult(r messages.TurnResult) {
	w := c.w
	t := c.trajs[r.TrajectoryID]
	if t == nil || !t.inflight || int(r.TurnIndex) != t.turn || r.Engine != t.engine {
		w.logf("ctl: stale result %s/%d from %s ignored", r.TrajectoryID, r.TurnIndex, r.Engine)
		return
	}
	t.inflight = false
	c.rt.Done(c.t(), t.engine, t.charged)
	_, _ = c.rt.ObserveHealth(t.engine, true, false)
	t.avoid = nil
	lo, _ := versionSpan(r)
	t.minV = min(t.minV, lo)
	w.orc.tokens(t.g.id, lo)
	t.ctx = append(t.ctx, r.Tokens...)
	for i := range r.Tokens {
		v := int32(r.ServingVersion)
		if i < len(r.TokenVersions) {
			v = r.TokenVersions[i]
		}
		t.vers, t.mask = append(t.vers, v), append(t.mask, 1)
	}
	t.turn++
	if t.turn < t.turns {
		for i := 0; i < envTokens; i++ {
			t.ctx, t.vers, t.mask = append(t.ctx, int32(61+i)), append(t.vers, 0), append(t.mask, 0)
		}
		c.after(envDelay, "", func() { c.routeTurn(t) })
		return
	}
	c.rt.Finish(c.t(), t.id)
	delete(c.trajs, t.id)
	if w.rng.Float64() < t.g.p {
		t.reward = 1
	}
	t.g.done++
	if t.g.done == len(t.g.trajs) {
		c.groupReady(t.g)
	}
}

func (c *ctlNode) abortGroup(g *rgroup, why string) {
	w := c.w
	g.aborted = true
	for _, t := range g.trajs {
		if t.inflight {
			c.rt.Done(c.t(), t.engine, t.charged)
			t.inflight = false
		}
		c.rt.Finish(c.t(), t.id)
		delete(c.trajs, t.id)
	}
	delete(c.groups, g.id)
	w.logf("ctl: abort %s: %s", g.id, why)
	if err := c.st.Abort(g.cid, c.t()); err != nil {
		w.fail(InvProtocol, "staleness: %v", err)
		return
	}
	c.drainRequeues(g)
	c.tryAdmit()
}

// drainRequeues carries out the staleness controller's requeue of g.
func (c *ctlNode) drainRequeues(g *rgroup) {
	for _, r := range c.st.Drain() {
		c.w.logf("ctl: %s", r)
		if r.GroupID != g.cid {
			c.w.fail(InvProtocol, "staleness: requeue of %s while settling %s", r.GroupID, g.cid)
			return
		}
		c.w.orc.settle(g.id, "requeued")
		if !c.w.cfg.has(BugRequeueLosesPrompt) {
			c.source = append(c.source, r.PromptID)
		}
	}
}

// ---- groups: staleness controller, filter, mini-batches -------------------

// judge takes a group from the buffer: staleness controller, then filter.
func (c *ctlNode) judge(g *rgroup) {
	w := c.w
	oldest := int64(math.MaxInt64)
	samples := make([]filter.Sample, len(g.trajs))
	for i, t := range g.trajs {
		oldest = min(oldest, t.minV)
		samples[i] = filter.Scalar(g.id, t.reward)
	}
	if w.cfg.has(BugStalenessFromSchedule) {
		oldest = staleness.UnknownVersion
	}
	if err := c.st.Accept(g.cid, oldest, c.t()); err != nil {
		w.fail(InvProtocol, "staleness: %v", err)
		return
	}
	d, err := c.filt.Decide(samples)
	if err != nil {
		w.fail(InvProtocol, "filter: %v", err)
		return
	}
	w.logf("ctl: group %s oldest v%d: %s", g.id, oldest, d)
	if d.Keep {
		c.pending = append(c.pending, g)
		c.tryBatch()
	} else {
		if !w.cfg.has(BugFilterLeaksCapacity) {
			if err := c.st.Filter(g.cid, c.t()); err != nil {
				w.fail(InvProtocol, "staleness: %v", err)
				return
			}
		}
		w.orc.settle(g.id, "filtered")
	}
	c.tryAdmit()
}

// tryBatch checks pending groups for the current step until B passed,
// then sends the batch to the trainer.
func (c *ctlNode) tryBatch() {
	w := c.w
	if c.batchSent || c.stepsDone >= int64(w.cfg.Steps) || c.recovering {
		return
	}
	for int64(len(c.batch)) < w.wl.B && len(c.pending) > 0 {
		g := c.pending[0]
		c.pending = c.pending[1:]
		d, err := c.st.CheckForTraining(g.cid, c.t())
		if err != nil {
			w.fail(InvProtocol, "staleness: %v", err)
			return
		}
		w.logf("ctl: check %s", d)
		if d.Verdict == staleness.Train {
			c.batch = append(c.batch, g)
		} else {
			c.drainRequeues(g)
		}
	}
	if int64(len(c.batch)) < w.wl.B {
		return
	}
	data, err := encodeBatch(c.batch)
	if err != nil {
		w.fail(InvWire, "encode token batch: %v", err)
		return
	}
	c.batchSent, c.batchStep, c.batchData = true, c.st.Step(), data
	c.sendBatch()
	c.tryAdmit()
}

func (c *ctlNode) sendBatch() {
	w := c.w
	step := c.batchStep
	ids := make([]string, len(c.batch))
	for i, g := range c.batch {
		ids[i] = g.id
	}
	w.send(c.bus, subjTrain, messages.TrainBatch{Header: messages.Header{RunID: runID, Sender: "ctl", Version: step - 1},
		Step: step, GroupIDs: ids, Trajectories: int32(len(c.batch) * w.wl.N),
		Batch: messages.BatchRef{Inline: c.batchData, Bytes: int64(len(c.batchData)), Checksum: checksumOf(c.batchData)}})
	c.after(retransmit, "", func() {
		if c.batchSent && c.batchStep == step {
			w.logf("ctl: no StepDone for step %d: resend batch", step)
			c.sendBatch()
		}
	})
}

func (c *ctlNode) onStepDone(m messages.StepDone) {
	w := c.w
	if c.awaitStep != 0 && m.Step == c.awaitStep {
		// The batch sent before a crash: the resumed staleness controller
		// (ResumeInFlight) counts it and advances on this StepDone.
		c.awaitStep = 0
	}
	advanced, err := c.st.StepDone(m.Step, c.t())
	if err != nil {
		w.fail(InvProtocol, "staleness: %v", err)
		return
	}
	if !advanced {
		return
	}
	if !c.batchSent || c.batchStep != m.Step {
		w.fail(InvProtocol, "StepDone %d without a batch sent for it", m.Step)
		return
	}
	c.stepsDone = m.Step
	c.watch.StepDone(c.t())
	c.batch, c.batchSent, c.batchData = nil, false, nil
	w.orc.stepDone(m.Step)
	w.logf("ctl: step %d done (trainer version %d)", m.Step, m.NewVersion)
	if c.stepsDone >= int64(w.cfg.Steps) {
		w.finish()
		return
	}
	c.tryBatch()
	c.tryAdmit()
}

// heldGroups is every group the controller still holds in flight.
func (c *ctlNode) heldGroups() map[string]bool {
	h := map[string]bool{}
	for id := range c.groups {
		h[id] = true
	}
	for _, g := range c.pending {
		h[g.id] = true
	}
	for _, g := range c.batch {
		h[g.id] = true
	}
	// Buffered groups, and those lost with a buffer: the ledger has them
	// unsettled, and the next term would requeue them.
	for _, g := range append(append([]*rgroup(nil), c.buf.groups...), c.orphans...) {
		h[g.id] = true
	}
	return h
}

// encodeBatch packs the batch's trajectories (tokens, loss mask, policy
// version per token) as an Arrow IPC token batch, as the real trainer
// receives them.
func encodeBatch(groups []*rgroup) ([]byte, error) {
	tb, err := messages.NewTokenBatch(messages.BatchSpec{})
	if err != nil {
		return nil, err
	}
	for _, g := range groups {
		for _, t := range g.trajs {
			if err := tb.Append(messages.Trajectory{ID: t.id, GroupID: g.id, Reward: float32(t.reward),
				PromptLen: int32(t.promptN), TokenIDs: t.ctx, Logprobs: make([]float32, len(t.ctx)),
				LossMask: t.mask, PolicyVersions: t.vers}); err != nil {
				return nil, err
			}
		}
	}
	return messages.EncodeTokenBatch(tb)
}
