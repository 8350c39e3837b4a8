package sim

import (
	"math/rand"
	"time"
)

// The step rule's promises, checked (InvAnnounce, InvTrainedTwice): a
// step is announced only after its publish succeeded, and a step whose
// publish failed is published again, never trained again.

// announced: the trainer sends StepDone for step with version; again
// marks the answer to a retransmission of a step trained before.
func (o *oracle) announced(step, version int64, again bool) {
	if again {
		return // said again: the first announcement was checked
	}
	o.checks++
	if !o.published[version] {
		o.w.fail(InvAnnounce, "the trainer announces step %d (version %d), but the publisher never settled version %d routable: its publish failed or is still being tried", step, version, version)
		return
	}
	o.announcedStep = max(o.announcedStep, step)
}

// stepTrainedOnce counts a trained step: a step is trained once (a failed
// publish is tried again with the same weights, a retransmission of its
// batch is answered, not trained). It reports whether the count is 1.
func (o *oracle) stepTrainedOnce(step int64) bool {
	o.checks++
	o.stepTrained[step]++
	if n := o.stepTrained[step]; n > 1 {
		o.w.fail(InvTrainedTwice, "step %d trained %d times", step, n)
		return false
	}
	return true
}

// outageSalt seeds the fleet-outage draw's stream (seed ^ outageSalt):
// a stream of its own, so every draw of the workload, the fault schedule
// and issue 37's inputs stays as it was.
const outageSalt = 0x0031_7e7a_ba0c

// drawOutage appends, in the process-fault scenarios, a fleet outage to
// one seed in eight, after every other fault (a mask over the schedule
// drawn before keeps its meaning). Two in three are short (3–20 s: the
// publishes meanwhile fail and are tried again until one succeeds), one
// in three outlasts the default retry schedule (2+4+8+16+32 s after the
// first failure: 70–90 s), so the step rule gives up and the run ends.
func (p *faultPlan) drawOutage(rng *rand.Rand, cfg Config, wl workload) {
	if (cfg.Scenario != ScenarioFaults && cfg.Scenario != ScenarioMixed) || rng.Intn(8) != 0 {
		return
	}
	dur := 3*time.Second + time.Duration(rng.Int63n(int64(17*time.Second)))
	if rng.Intn(3) == 0 {
		dur = 70*time.Second + time.Duration(rng.Int63n(int64(20*time.Second)))
	}
	f := &fault{kind: FaultFleetOutage, at: 500*msec + time.Duration(rng.Int63n(int64(wl.Horizon))), dur: dur}
	f.idx = len(p.faults)
	f.enabled = cfg.faultMask == nil || (f.idx < len(cfg.faultMask) && cfg.faultMask[f.idx])
	p.faults = append(p.faults, f)
}

// leaving is the engines an engine-leave (its one) or a fleet outage
// (every engine) takes out of the fleet.
func (f *fault) leaving(w *world) []*engineNode {
	if f.kind == FaultFleetOutage {
		return w.engines
	}
	return w.engines[f.engine : f.engine+1]
}
