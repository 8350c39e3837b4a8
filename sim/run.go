package sim

import (
	"fmt"
	"runtime/debug"
	"strings"
	"time"
)

// Result summarises one run.
type Result struct {
	Seed     int64
	Scenario Scenario
	// Workload is the drawn shape (S, B, W, n, engines, …).
	Workload string
	// Events is the number of events (deliveries and timers) processed;
	// the invariants were checked after each.
	Events int
	// InvariantChecks counts individual invariant evaluations.
	InvariantChecks int64
	// VirtualTime is the simulated time the run took.
	VirtualTime time.Duration
	// StepsTrained is the number of trainer steps completed.
	StepsTrained int64
	// Faults counts injected faults by kind.
	Faults map[FaultKind]int
	// Trained, Filtered and Requeued count group outcomes; MaxStaleness is
	// the largest staleness a trained group had.
	Trained, Filtered, Requeued, MaxStaleness int64
	// StepDowns counts controller terms that stepped down (their watch
	// said so), NoStepDowns those of them for going without a step;
	// BuffersLost counts stream-loss faults that struck an unreplicated
	// buffer, LostGroups the finished groups lost with one (each requeued
	// by the next term).
	StepDowns, NoStepDowns, BuffersLost, LostGroups int
	// PublishRetries counts the step rule's tries of a failed publish
	// again; GaveUp is the step the rule gave up (its publish failed
	// publisher.attempts times), which ended the run, 0 for none — in
	// failover the newest step a term's trainer gave up, which ended
	// that term, not the run.
	PublishRetries int
	GaveUp         int64
	// FetchRetries counts the trainer's fetches of a batch tried again
	// (the trajectory buffer was electing a leader); FetchGaveUps those
	// the fetch rule gave up, each of which ended the run.
	FetchRetries, FetchGaveUps int
	// Rollouts counts the failover world's rollout outcomes.
	Rollouts RolloutFates
	// LogHash is the SHA-256 of the event log: equal seeds give equal hashes.
	LogHash string
	// Log is the whole event log when Config.KeepLog is set.
	Log []string
	// Violation is set when an invariant broke (Run also returns it).
	Violation *Violation
}

// Violation is a broken invariant: the seed, the invariant, the shortest
// trace found and the fault schedule that produced it. It wraps
// ErrViolation.
type Violation struct {
	Seed      int64
	Scenario  Scenario
	Steps     int
	Bugs      []Bug
	Invariant Invariant
	Detail    string
	// At is the virtual time of the violation.
	At time.Duration
	// Trace is the last events before the violation (Config.TraceEvents),
	// heartbeats and engine steps left out.
	Trace []string
	// Related is the causal slice: the events (from the whole run) that
	// name the groups the violation is about — or its engines when it
	// names no group — the last TraceEvents of them.
	Related []string
	// Faults is the fault schedule of the reported run; with
	// Config.Minimize it is the smallest one found that still breaks the
	// same invariant, out of OriginalFaults drawn.
	Faults         []string
	OriginalFaults int
	Minimized      bool
	// Reruns is how many runs minimisation took.
	Reruns int
}

func (v *Violation) Unwrap() error { return ErrViolation }

func (v *Violation) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sim: invariant %s violated (seed %d, scenario %s) at %.3fs: %s\n", v.Invariant, v.Seed, v.Scenario, v.At.Seconds(), v.Detail)
	if len(v.Bugs) > 0 {
		fmt.Fprintf(&b, "planted bugs: %v\n", v.Bugs)
	}
	label := "fault schedule"
	if v.Minimized {
		label = fmt.Sprintf("minimal fault schedule (%d of %d faults, %d re-runs)", len(v.Faults), v.OriginalFaults, v.Reruns)
	}
	fmt.Fprintf(&b, "%s:\n", label)
	if len(v.Faults) == 0 {
		b.WriteString("  (no faults)\n")
	}
	b.WriteString(joinLines(v.Faults))
	if len(v.Related) > 0 {
		fmt.Fprintf(&b, "events naming the groups or engines involved (%d):\n%s", len(v.Related), joinLines(v.Related))
	}
	fmt.Fprintf(&b, "last %d events:\n%s", len(v.Trace), joinLines(v.Trace))
	fmt.Fprintf(&b, "reproduce: asyncrl sim --seed %d --steps %d --scenario %s", v.Seed, v.Steps, v.Scenario)
	for _, bug := range v.Bugs {
		fmt.Fprintf(&b, " --bug %s", bug)
	}
	return b.String()
}

// Run simulates one seed. It returns a *Violation (wrapping ErrViolation)
// when an invariant broke, an error wrapping ErrInvalidConfig for a bad
// config, and otherwise the run's summary.
func Run(cfg Config) (Result, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	res, v := runOnce(cfg)
	if v == nil {
		return res, nil
	}
	if cfg.Minimize {
		v = minimize(cfg, v)
		res.Violation = v
	}
	return res, v
}

// runOnce runs one seed (with cfg.faultMask) to the end or the first
// violation. A panic inside a core — a broken internal invariant — is a
// violation too.
func runOnce(cfg Config) (res Result, v *Violation) {
	if cfg.Scenario == ScenarioFailover {
		return runFailover(cfg)
	}
	w, err := newWorld(cfg)
	if err != nil {
		panic(fmt.Sprintf("sim: drawn workload is invalid: %v", err)) // drawWorkload only draws valid shapes
	}
	func() {
		defer func() {
			if r := recover(); r != nil {
				w.fail(InvProtocol, "panic: %v\n%s", r, firstLines(string(debug.Stack()), 12))
			}
		}()
		w.run()
	}()
	res = Result{Seed: cfg.Seed, Scenario: cfg.Scenario, Workload: w.wl.String(), Events: w.events,
		InvariantChecks: w.orc.checks, VirtualTime: w.now(), StepsTrained: w.orc.steps,
		Faults: map[FaultKind]int{}, Trained: w.orc.trained, Filtered: w.orc.filtered, Requeued: w.orc.requeued,
		MaxStaleness: w.orc.maxStale, StepDowns: w.ctl.stepDowns, NoStepDowns: w.ctl.noStepDowns,
		BuffersLost: w.ctl.buffersLost, LostGroups: w.ctl.lostGroups, PublishRetries: w.trainer.retries, GaveUp: w.trainer.gaveUp,
		FetchRetries: w.trainer.fetchRetries, FetchGaveUps: w.trainer.fetchGaveUps,
		LogHash: hexsum(w.logHash)}
	if cfg.KeepLog {
		res.Log = w.full()
	}
	for k, n := range w.faults.injected {
		res.Faults[k] = n
	}
	if w.violation != nil {
		v = w.violation
		v.Faults = w.faults.enabledList()
		v.OriginalFaults = len(w.faults.faults)
		res.Violation = v
	}
	return res, v
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// maxReruns bounds the work minimisation may do.
const maxReruns = 64

// minimize shrinks the fault schedule that broke invariant v.Invariant:
// first the shortest prefix of the schedule (bisection), then dropping
// faults one at a time (a greedy pass of delta debugging). The same seed
// is re-run each time; the schedule is drawn in full and masked, so the
// kept faults stay exactly as they were.
func minimize(cfg Config, orig *Violation) *Violation {
	n := orig.OriginalFaults
	if n == 0 {
		return orig
	}
	reruns := 0
	best := orig
	try := func(mask []bool) *Violation {
		reruns++
		c := cfg
		c.faultMask = mask
		_, v := runOnce(c)
		if v != nil && v.Invariant == orig.Invariant {
			return v
		}
		return nil
	}
	prefix := func(k int) []bool {
		m := make([]bool, n)
		for i := 0; i < k; i++ {
			m[i] = true
		}
		return m
	}
	// Bisection for the shortest failing prefix of the drawn schedule
	// (faults are indexed in draw order). Not every property is monotone
	// in the prefix, so the answer is a heuristic; the full schedule is
	// known to fail.
	lo, hi := 0, n
	for lo < hi && reruns < maxReruns {
		mid := (lo + hi) / 2
		if v := try(prefix(mid)); v != nil {
			hi, best = mid, v
		} else {
			lo = mid + 1
		}
	}
	mask := prefix(hi)
	for i := 0; i < hi && reruns < maxReruns; i++ {
		mask[i] = false
		if v := try(append([]bool(nil), mask...)); v != nil {
			best = v
		} else {
			mask[i] = true
		}
	}
	out := *best
	out.Minimized, out.OriginalFaults, out.Reruns = true, n, reruns
	return &out
}

// RolloutFates counts what the failover world's rollout groups did, as
// the rollout outcome core decided (failover_outcome.go).
type RolloutFates struct {
	// EpisodesAborted: episodes ended aborted (engine gone, the node
	// following a newer term); GroupsAborted: groups whose fate was
	// Aborted (an episode aborted, or the store gave up or was cut).
	EpisodesAborted, GroupsAborted int
	// StoresRetried: groups whose store failed at least once; StoresCut:
	// stores cut short because the node followed a newer term;
	// StoresGivenUp: stores that gave up at outcome.DefaultStoreFor.
	StoresRetried, StoresCut, StoresGivenUp int
	// RequeuedOnReports: groups the term's controller requeued on their
	// rollout's own EpisodeAborted reports; SweptAfterReports: of those,
	// groups the term then also swept as a dead node's (AbortGroups),
	// ignored as the controller core ignores an abort of a group it no
	// longer holds.
	RequeuedOnReports, SweptAfterReports int
	// Gated: a free slot's pulls held back because its engine serves a
	// version below the router's minimum (the term's tracker's RouterMin).
	Gated int
}

func (f *RolloutFates) add(o RolloutFates) {
	f.EpisodesAborted += o.EpisodesAborted
	f.GroupsAborted += o.GroupsAborted
	f.StoresRetried += o.StoresRetried
	f.StoresCut += o.StoresCut
	f.StoresGivenUp += o.StoresGivenUp
	f.RequeuedOnReports += o.RequeuedOnReports
	f.SweptAfterReports += o.SweptAfterReports
	f.Gated += o.Gated
}
