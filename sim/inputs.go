package sim

import (
	"fmt"
	"math"
	"math/rand"
	randv2 "math/rand/v2"
	"time"

	"github.com/asyncrl/asyncrl/actors/controller"
	"github.com/asyncrl/asyncrl/actors/filter"
	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/actors/staleness"
	"github.com/asyncrl/asyncrl/messages"
)

// The input generators of issue 37. The simulator reached only part of
// the cores' branches (sim/simcov measures it): every seed ran the DAPO
// filter, the requeue stale policy and bounded_sticky routing; the buffer
// never redelivered a group, no group was odd (a NaN reward, a
// trajectory short), an abort was reported once per group, a cancelled
// timer never fired. Planted bugs on such inputs went unseen. A seed now
// also draws, from a second stream of its own (so the workload and fault
// schedule drawn before issue 37 stay exactly as they were):
//
//   - the configuration the cores run under: dynamic sampling's mode
//     (filter, none, replace, zero_variance_mask) and max_sample_batches,
//     the stale policy (requeue, or accept: stale groups are trained and
//     counted), the router's policy, lag rule, version rule and hash
//     fallback, n = 1 groups now and then;
//   - rare inputs (all scenarios but default: they are delivery faults):
//     the trajectory buffer redelivers a judged group (its ack was lost),
//     a group's abort is reported by each of its trajectories, a
//     cancelled resend timer fires anyway (its tick was already in the
//     controller's mailbox), an engine leaves the fleet for a while;
//   - odd groups (every scenario: the reward function and the rollout
//     side produce them): a NaN reward, a group that lost trajectories on
//     the way (one left, or none), a trajectory whose every token is
//     masked out of the loss; per-token rewards on some seeds.

// inputsSalt seeds the second stream: seed ^ inputsSalt.
const inputsSalt = 0x1537_c0de_37

// inputs is what a seed drew for issue 37's generators.
type inputs struct {
	mode        filter.Mode
	maxSample   int
	replaceMin  float64 // min_replace_ratio
	stalePolicy staleness.StalePolicy
	router      policy.Config
	// rare inputs: probabilities per group / per cancel. abortEach is
	// retired (the real outcome core now says how many reports an aborted
	// group sends: one per trajectory); it is still drawn, and printed, so
	// every later draw of a seed and its inputs line stay as they were.
	redeliver, abortEach, timerRace float64
	// capacity: the controller publishes CapacityChanged (its Subjects
	// name a capacity subject), checked against W.
	capacity bool
	// tokenRewards: trajectories carry per-token rewards (a process
	// reward model) whose sum is the trajectory's reward.
	tokenRewards bool
	// odd: probability a finished group is odd (NaN reward, trajectories lost).
	odd float64
	// engineLeaves: an engine is removed from the fleet for a while and
	// comes back (the publisher's Leave, the router's RemoveReplica).
	engineLeaves bool
	// keySource: where a turn's session key comes from (router.go).
	keySource int
	// envFail: probability the environment fails between two turns,
	// aborting the episode and its group (a flaky tool, a sandbox lost).
	envFail float64
}

func (in inputs) String() string {
	return fmt.Sprintf("filter=%s/%d/%.2f stale=%s router=%s/%s/%s/%s keys=%d capacity=%v token_rewards=%v env_fail=%.3f redeliver=%.2f abort_each=%.2f timer_race=%.2f odd=%.2f engine_leaves=%v",
		in.mode, in.maxSample, in.replaceMin, in.stalePolicy, in.router.Policy, in.router.LagRule, in.router.VersionRule, in.router.HashFallback,
		in.keySource, in.capacity, in.tokenRewards, in.envFail, in.redeliver, in.abortEach, in.timerRace, in.odd, in.engineLeaves)
}

// drawInputs draws a seed's inputs from its second stream. It may set
// wl.N to 1 (a group of one: SkyRL keeps it in every mode).
func drawInputs(rng *rand.Rand, cfg Config, wl *workload) inputs {
	in := inputs{mode: filter.ModeFilter, maxSample: filter.DefaultConfig().MaxSampleBatches, stalePolicy: staleness.PolicyRequeue,
		router: policy.DefaultConfig()}
	// The draws' order is the seeds' meaning: each helper draws in place,
	// in the order they are called here.
	in.drawFilter(rng, wl)
	if rng.Intn(7) == 0 {
		in.stalePolicy = staleness.PolicyAccept
	}
	if rng.Intn(12) == 0 {
		wl.N = 1
	}
	drawRouter(rng, &in.router)
	if rng.Intn(3) == 0 {
		in.odd = 0.02 + 0.1*rng.Float64()
	}
	in.capacity = rng.Intn(2) == 0
	in.tokenRewards = rng.Intn(4) == 0
	switch r := rng.Intn(10); {
	case r == 0:
		in.keySource = keyNone
	case r < 3:
		in.keySource = keyBody
	}
	if rng.Intn(3) == 0 {
		in.envFail = 0.01 + 0.04*rng.Float64()
	}
	if cfg.Scenario == ScenarioDefault {
		return in
	}
	in.drawDeliveryFaults(rng, wl)
	return in
}

// drawFilter draws the filter mode, the sample-batch cap and the replace
// ratio.
func (in *inputs) drawFilter(rng *rand.Rand, wl *workload) {
	switch r := rng.Intn(20); {
	case r < 9:
	case r < 12:
		in.mode = filter.ModeNone
	case r < 16:
		in.mode = filter.ModeReplace
	default:
		in.mode = filter.ModeZeroVarianceMask
	}
	if in.mode != filter.ModeNone && rng.Intn(4) == 0 {
		in.maxSample = 3 + rng.Intn(3) // exhaustion (SamplingExhausted) bites now and then
	}
	in.replaceMin = filter.DefaultConfig().MinReplaceRatio
	if r := 0.34 + 0.26*rng.Float64(); rng.Intn(2) == 0 && wl.B == 3 {
		// Above 1/B: a generation batch with one good group of three is
		// discarded (at B ≤ 3 the default 0.3 keeps any with one). Two of
		// three is as high as it goes: rarer batches would starve the run
		// past ProgressBound on the seeds' hard prompts.
		in.replaceMin = r
	}
}

// drawRouter draws the router policy's rules, lag, sweep and session TTL.
func drawRouter(rng *rand.Rand, rc *policy.Config) {
	if rng.Intn(2) == 0 {
		rc.Policy = policy.Policies[rng.Intn(len(policy.Policies))]
	}
	if rng.Intn(4) == 0 {
		rc.LagRule = policy.LagHold
	}
	if rng.Intn(5) == 0 {
		rc.VersionRule = policy.VersionNewest
	}
	if rng.Intn(3) == 0 {
		rc.HashFallback = policy.HashFirstHealthy
	}
	if rng.Intn(3) == 0 {
		rc.MaxVersionLag = rng.Int63n(3)
	}
	rc.SweepInterval = 10 * time.Second
	if rng.Intn(4) == 0 {
		rc.SessionTTL = time.Duration(1+rng.Intn(5)) * time.Second // sessions expire mid-run
	}
}

// drawDeliveryFaults draws the fault scenarios' redelivery, abort and
// timer-race rates and whether an engine leaves.
func (in *inputs) drawDeliveryFaults(rng *rand.Rand, wl *workload) {
	if rng.Intn(2) == 0 {
		in.redeliver = 0.05 + 0.2*rng.Float64()
	}
	if rng.Intn(2) == 0 {
		in.abortEach = 0.5 + 0.5*rng.Float64()
	}
	if rng.Intn(2) == 0 {
		in.timerRace = 0.2 + 0.6*rng.Float64()
	}
	in.engineLeaves = wl.Engines > 2 && rng.Intn(3) == 0
}

// ---- configuration the cores run under ------------------------------------

// subjects are the controller core's subjects; the capacity subject only
// when the seed drew it (without it the core publishes no CapacityChanged).
func (c *ctlNode) subjects() controller.Subjects {
	s := controller.Subjects{Prompts: subjPrompts, Train: subjTrain, Ledger: subjLedger, Settled: subjSettled}
	if c.w.in.capacity {
		s.Capacity = subjCapacity
	}
	return s
}

// donorRand is replace mode's donor draw for one incarnation of the
// controller (controller.Config.Rand), seeded from the run's seed.
func (c *ctlNode) donorRand() *randv2.Rand {
	return randv2.New(randv2.NewPCG(uint64(c.w.cfg.Seed), uint64(c.inc)))
}

// ---- rare inputs: the trajectory buffer, aborts, timers --------------------

// redeliver: the judge's ack of g was lost, so the buffer delivers g again
// (JetStream redelivers an unacked message after its ack wait); the
// sampling core judges it again and the controller core sees a GroupReady
// or GroupFiltered for a group it already settled or holds.
func (c *ctlNode) maybeRedeliver(g *rgroup) {
	w := c.w
	if w.in.redeliver == 0 || w.xrng.Float64() >= w.in.redeliver {
		return
	}
	lag := time.Duration(50+w.xrng.Intn(450)) * msec
	c.after(lag, "", func() {
		w.logf("ctl: the buffer redelivers %s (its ack was lost)", g.id)
		c.judge(g)
	})
}

// raceCancel: a cancelled timer whose tick was already in the controller's
// mailbox still reaches the core (the actor shell cannot take it back).
func (c *ctlNode) raceCancel(name string) {
	w := c.w
	if w.in.timerRace == 0 || w.xrng.Float64() >= w.in.timerRace {
		return
	}
	core := c.core
	c.after(0, "", func() {
		if c.core == core {
			w.logf("ctl: a cancelled %s tick was already queued", name)
			c.core.Tick(c.t(), name)
			c.apply(c.core.Drain())
		}
	})
}

// envFails: the environment fails between two turns of t (a flaky tool,
// a sandbox lost); the rollout abandons the episode and its group.
func (c *ctlNode) envFails(t *rtraj) bool {
	w := c.w
	if w.in.envFail == 0 || w.xrng.Float64() >= w.in.envFail {
		return false
	}
	c.endTraj(t, "environment failed after turn "+itoa(int64(t.turn)))
	return true
}

// ---- odd groups ------------------------------------------------------------

// oddGroup may make a finished group odd before it is stored: a NaN
// reward (the reward function failed), or trajectories lost on the way
// (one left, or none at all). The oracle learns the oldest token version
// of what is left.
func (c *ctlNode) oddGroup(g *rgroup) {
	w := c.w
	if w.in.odd == 0 || w.xrng.Float64() >= w.in.odd || len(g.trajs) == 0 {
		return
	}
	switch w.xrng.Intn(5) {
	case 0, 1:
		t := g.trajs[w.xrng.Intn(len(g.trajs))]
		t.reward = math.NaN()
		w.logf("ctl: odd group %s: trajectory %s scored NaN", g.id, t.id)
		return
	case 2:
		g.trajs = g.trajs[:1]
	case 3:
		// Every token of one trajectory is out of the loss (an overlong
		// or truncated episode whose tokens are masked): it is not live.
		t := g.trajs[w.xrng.Intn(len(g.trajs))]
		t.mask = make([]uint8, len(t.mask))
		t.masked = true
	default:
		g.trajs = nil
	}
	oldest := int64(math.MaxInt64)
	for _, t := range g.trajs {
		if !t.masked {
			oldest = min(oldest, t.minV)
		}
	}
	w.orc.setOldest(g.id, oldest)
	w.logf("ctl: odd group %s: %d trajectories reach the buffer", g.id, len(g.trajs))
}

// ---- bookkeeping the cores report --------------------------------------------

// onCapacity checks the controller's CapacityChanged against the bound
// it must keep: never more running than workers, never more capacity than
// workers left.
func (c *ctlNode) onCapacity(m messages.CapacityChanged) {
	w := c.w
	w.orc.checks++
	if m.Running > w.wl.W || m.Capacity > w.wl.W-m.Running {
		w.fail(InvProtocol, "controller reports capacity %d with %d running (W=%d)", m.Capacity, m.Running, w.wl.W)
	}
}

// checkBooks: the controller core holds in flight exactly the groups its
// durable ledger has admitted and not settled.
func (c *ctlNode) checkBooks() {
	w := c.w
	if c.down > 0 || w.violation != nil {
		return
	}
	w.orc.checks++
	if n, want := c.core.InFlight(), len(c.led.unsettled); n != want {
		w.fail(InvLedger, "controller core holds %d groups in flight, its ledger %d unsettled", n, want)
	}
}

// retire adds an incarnation's counters to the run's before its core is
// replaced (a crash, a term's step-down) or the run ends.
func (c *ctlNode) retire() {
	if c.core == nil {
		return
	}
	st, m := c.core.Stats(), c.core.Staleness()
	c.totals.Duplicates += st.Duplicates
	c.totals.Resent += st.Resent
	c.totals.SamplingExhausted += st.SamplingExhausted
	c.totals.Replaced += st.Replaced
	c.totals.Masked += st.Masked
	c.violations += m.Violations
	c.futureVersions += m.FutureVersions
	s := c.smp.Stats()
	for r, n := range s.ByReason {
		c.byReason[r] += n
	}
	c.invalid += s.Invalid
}

// coreTotals are the retired incarnations' controller counters.
type coreTotals = controller.Stats

// ---- engines that leave the fleet --------------------------------------------

// drawExtra appends issue 37's faults to the schedule, drawn from the
// second stream after every other fault (their indices come last, so a
// mask over the schedule drawn before keeps its meaning).
func (p *faultPlan) drawExtra(rng *rand.Rand, cfg Config, wl workload, in inputs) {
	if !in.engineLeaves {
		return
	}
	for i, n := 0, 1+rng.Intn(2); i < n; i++ {
		f := &fault{kind: FaultEngineLeave, at: 500*msec + time.Duration(rng.Int63n(int64(wl.Horizon))),
			dur: time.Duration(500+rng.Intn(3500)) * msec, engine: rng.Intn(wl.Engines)}
		f.idx = len(p.faults)
		f.enabled = cfg.faultMask == nil || (f.idx < len(cfg.faultMask) && cfg.faultMask[f.idx])
		p.faults = append(p.faults, f)
	}
}

// engineLeave: engine e is taken out of the fleet (decommissioned for
// maintenance): the publisher forgets it (Leave), the router removes its
// replica and its sessions; it serves nothing until the fault ends
// (engineBack). A second leave of an engine already out composes.
func (w *world) engineLeave(e *engineNode) {
	if e.left++; e.left > 1 {
		return
	}
	w.logf("%s: leaves the fleet", e.id)
	e.crash()
	w.pub.leave(e.id)
	w.ctl.removeReplica(e.id)
}

// engineBack adds engine e back to the fleet, holding the weights it had;
// it rejoins the publisher and the router through its acks.
func (w *world) engineBack(e *engineNode) {
	if e.left--; e.left > 0 {
		return
	}
	w.logf("%s: back in the fleet", e.id)
	w.ctl.addReplica(e.id)
	e.restart()
}

// removeReplica takes an engine out of routing: its sessions are forgotten.
func (c *ctlNode) removeReplica(id string) {
	if c.down > 0 {
		return
	}
	if err := c.rt.Step(c.t(), policy.RemoveReplica{URL: id}); err != nil {
		c.w.fail(InvProtocol, "router: %v", err)
	}
}

// addReplica puts an engine back, with what the router shell knows of it
// (its acks raise its version from here on).
func (c *ctlNode) addReplica(id string) {
	if c.down > 0 {
		return // a restarted controller's router is built with every engine
	}
	urls := []string{id}
	for _, rv := range c.rt.Replicas() {
		if rv.URL == id {
			return // a restarted controller's router already has it
		}
		urls = append(urls, rv.URL)
	}
	if err := c.rt.SetReplicas(urls); err != nil {
		c.w.fail(InvProtocol, "router: add %s: %v", id, err)
		return
	}
	if k := c.know[id]; k != nil {
		c.change(policy.SetVersion{URL: id, Version: k.version})
		c.change(policy.SetState{URL: id, State: k.state})
		c.change(policy.SetHealth{URL: id, Healthy: false}) // until it is heard from again
	}
}
