package sim

import (
	"math"
	"sort"
	"strings"
	"time"

	"github.com/asyncrl/asyncrl/actors/staleness"
)

// Invariant names a property the simulator checks after every event.
type Invariant string

// The invariants.
const (
	// InvStaleness: every trained group's staleness under the configured
	// measure is ≤ S — token: trainer version − its oldest token's version;
	// scheduled: the trainer step − the step at which it was admitted.
	InvStaleness Invariant = "staleness-bound"
	// InvTrainedTwice: no group is trained twice.
	InvTrainedTwice Invariant = "group-trained-once"
	// InvLedger: every prompt ends trained, filtered or requeued exactly
	// once — never settled twice, never lost.
	InvLedger Invariant = "prompt-settled-once"
	// InvRouting: no request is routed to an engine that is paused,
	// updating, unhealthy or below the minimum version.
	InvRouting Invariant = "routing-gate"
	// InvMonotonic: each engine's serving version only increases.
	InvMonotonic Invariant = "serving-version-monotonic"
	// InvChecksum: no engine serves weights whose checksum failed.
	InvChecksum Invariant = "no-corrupt-weights-served"
	// InvInvisible: a version whose manifest is not committed (publisher
	// crashed between payload and manifest) is never served or routed to.
	InvInvisible Invariant = "uncommitted-version-invisible"
	// InvSync: once faults have healed, every engine serves the version
	// published SyncBound ago, and at the end the latest one.
	InvSync Invariant = "engines-converge"
	// InvProgress: once faults have healed, a trainer step completes
	// within ProgressBound (no deadlock).
	InvProgress Invariant = "progress"
	// InvTermStepDown: a term whose trajectory buffer was lost steps down
	// within the watch's UnhealthyAfter plus the probe interval (a stuck
	// term is found long before the run's time limit).
	InvTermStepDown Invariant = "term-steps-down"
	// InvFencing (failover): no two live nodes hold the same token, and a
	// term whose save the store refused as fenced asks for nothing but
	// stopping its pipeline and giving the lease up.
	InvFencing Invariant = "fencing"
	// InvTrainedDurable (failover): a step's prompts are marked trained
	// only once the store holds that step durably, with those prompts.
	InvTrainedDurable Invariant = "trained-after-durable"
	// InvDeadNodeRequeue (failover): once the holder saw a rollout node
	// leave, each group it ran for the term was requeued, and no group is
	// reported aborted twice.
	InvDeadNodeRequeue Invariant = "dead-node-groups-requeued-once"
	// InvDurableMonotonic (failover): the durable progress never goes
	// back, and advances one step at a time.
	InvDurableMonotonic Invariant = "durable-progress-monotonic"
	// InvRankFencing (failover): a trainer node's rank host serves ranks
	// of at most one group, of the newest term whose request it observed
	// (cluster/rankhost/fence's invariant), and every request it gets
	// carries a token the lease issued to the request's sender.
	InvRankFencing Invariant = "rank-fencing"
	// InvAnnounce: the trainer announces a step (its first StepDone)
	// only once the publisher settled its version routable — never while
	// its publish failed or is being tried again — and the step rule
	// gives a step up only after the config's publisher.attempts failed
	// tries, never one it announced (the step rule's promises).
	InvAnnounce Invariant = "step-announced-after-publish"
	// InvWire: every message on the bus decodes.
	InvWire Invariant = "wire-decode"
	// InvProtocol: a component answered with an error its peers never
	// provoke in a correct system (e.g. a step acknowledged ahead).
	InvProtocol Invariant = "protocol"
)

// Invariants lists what is checked, for summaries.
var Invariants = []Invariant{InvStaleness, InvTrainedTwice, InvLedger, InvRouting, InvMonotonic,
	InvChecksum, InvInvisible, InvSync, InvProgress, InvTermStepDown, InvFencing, InvTrainedDurable,
	InvDeadNodeRequeue, InvDurableMonotonic, InvRankFencing, InvAnnounce, InvWire, InvProtocol}

type oGroup struct {
	prompt string
	oldest int64
	// scheduled is SkyRL's global_step when the group was admitted: the
	// trainer's committed steps + 1, as the oracle saw the trainer commit
	// (not the controller's view, which a crash can leave behind).
	scheduled int64
	outcome   string
	trained   int
}

type oPrompt struct {
	final  string // trained | filtered
	live   string // group in flight
	queued bool   // requeued, waiting to be admitted again
}

// oracle is the simulator's independent bookkeeping of what happened;
// invariants compare the system's state against it.
type oracle struct {
	w          *world
	groups     map[string]*oGroup
	prompts    map[string]*oPrompt
	lastServe  []int64
	lastStepAt time.Duration
	steps      int64
	committed  int64 // the highest step the trainer committed
	checks     int64
	trained    int64
	filtered   int64
	requeued   int64
	maxStale   int64
	// staleTrained counts groups trained beyond S (stale_policy accept).
	staleTrained int64
	// published: the versions the publisher's tracker settled routable
	// (its record, not the trainer's); announcedStep: the newest step
	// the trainer announced for the first time; stepTrained: how often
	// each step was trained (trainer_check.go).
	published     map[int64]bool
	announcedStep int64
	stepTrained   map[int64]int
}

func newOracle(w *world) *oracle {
	return &oracle{w: w, groups: map[string]*oGroup{}, prompts: map[string]*oPrompt{},
		published: map[int64]bool{}, stepTrained: map[int64]int{}}
}

func (o *oracle) prompt(p string) *oPrompt {
	op := o.prompts[p]
	if op == nil {
		op = &oPrompt{}
		o.prompts[p] = op
	}
	return op
}

// admit: the controller admitted group g for prompt p.
func (o *oracle) admit(g, p string) {
	o.checks++
	op := o.prompt(p)
	switch {
	case op.final != "":
		o.w.fail(InvLedger, "prompt %s admitted again as %s after it was %s", p, g, op.final)
	case op.live != "":
		o.w.fail(InvLedger, "prompt %s admitted as %s while %s is still in flight", p, g, op.live)
	case o.groups[g] != nil:
		o.w.fail(InvLedger, "group id %s admitted twice", g)
	}
	op.live, op.queued = g, false
	o.groups[g] = &oGroup{prompt: p, oldest: math.MaxInt64, scheduled: o.committed + 1}
}

// tokens: the controller accepted a turn of group g whose tokens were
// generated at versions lo..hi.
func (o *oracle) tokens(g string, lo int64) {
	if og := o.groups[g]; og != nil && lo < og.oldest {
		og.oldest = lo
	}
}

// setOldest: the rollout side lost trajectories of group g on the way
// (an odd group): the oldest token version of what is left.
func (o *oracle) setOldest(g string, oldest int64) {
	if og := o.groups[g]; og != nil {
		og.oldest = oldest
	}
}

// settle records a group's one terminal outcome.
func (o *oracle) settle(g, outcome string) {
	o.checks++
	og := o.groups[g]
	if og == nil {
		o.w.fail(InvLedger, "group %s settled as %s but was never admitted", g, outcome)
		return
	}
	if og.outcome != "" {
		o.w.fail(InvLedger, "group %s (prompt %s) settled twice: %s, then %s", g, og.prompt, og.outcome, outcome)
		return
	}
	og.outcome = outcome
	op := o.prompt(og.prompt)
	if op.live == g {
		op.live = ""
	}
	switch outcome {
	case "requeued":
		o.requeued++
		op.queued = true
	default:
		if op.final != "" {
			o.w.fail(InvLedger, "prompt %s settled as %s by %s after it was already %s", og.prompt, outcome, g, op.final)
			return
		}
		op.final = outcome
		if outcome == "filtered" {
			o.filtered++
		}
	}
}

// trainedBatch: the trainer committed step `step`, trained on version
// `version`, with these groups.
// seen is the oldest generated-token version per group as the trainer
// read it from the batch's token data (masked: zero_variance_mask zeroed
// every loss mask of the group, so nothing of it is trained).
func (o *oracle) trainedBatch(step, version int64, groups []string, seen map[string]int64) {
	o.committed = max(o.committed, step)
	if !o.stepTrainedOnce(step) {
		return
	}
	for _, g := range groups {
		o.checks += 2
		og := o.groups[g]
		if og == nil {
			o.w.fail(InvLedger, "trainer trained unknown group %s at step %d", g, step)
			return
		}
		og.trained++
		if og.trained > 1 {
			o.w.fail(InvTrainedTwice, "group %s (prompt %s) trained %d times, the last at step %d", g, og.prompt, og.trained, step)
			return
		}
		if og.oldest == math.MaxInt64 && seen[g] != masked {
			o.w.fail(InvStaleness, "group %s trained at step %d without any accepted token", g, step)
			return
		}
		if s, ok := seen[g]; !ok || (s != masked && s != og.oldest) {
			o.w.fail(InvStaleness, "group %s: the trainer's token data says oldest version %d, the engines produced %d", g, s, og.oldest)
			return
		}
		accept := o.w.in.stalePolicy == staleness.PolicyAccept
		if o.w.cfg.Measure == staleness.MeasureToken {
			lag := version - og.oldest
			o.maxStale = max(o.maxStale, lag)
			if lag > o.w.wl.S && accept {
				o.staleTrained++ // stale_policy accept: trained anyway, counted by the controller
			} else if lag > o.w.wl.S {
				o.w.fail(InvStaleness, "group %s trained on version %d with oldest token version %d: token staleness %d > S=%d", g, version, og.oldest, lag, o.w.wl.S)
				return
			}
		} else {
			lag := step - og.scheduled
			o.maxStale = max(o.maxStale, lag)
			if lag > o.w.wl.S && accept {
				o.staleTrained++
			} else if lag > o.w.wl.S {
				o.w.fail(InvStaleness, "group %s trained at step %d, scheduled at step %d: scheduled staleness %d > S=%d", g, step, og.scheduled, lag, o.w.wl.S)
				return
			}
		}
		o.trained++
		o.settle(g, "trained")
	}
}

// markedTrained: the controller's ledger marks group g trained (its
// step's StepDone arrived); the trainer must have trained it, once.
func (o *oracle) markedTrained(g string) {
	o.checks++
	og := o.groups[g]
	if og == nil || og.trained != 1 || og.outcome != "trained" {
		n, outcome := 0, "never admitted"
		if og != nil {
			n, outcome = og.trained, og.outcome
		}
		o.w.fail(InvLedger, "the controller marked group %s trained, but the trainer trained it %d times (outcome %q)", g, n, outcome)
	}
}

// stepDone: the controller saw step `step` complete.
func (o *oracle) stepDone(step int64) {
	o.steps = step
	o.lastStepAt = o.w.now()
}

// checkAll runs after every event.
func (o *oracle) checkAll() {
	w := o.w
	now := w.now()
	if o.lastServe == nil {
		o.lastServe = make([]int64, len(w.engines))
	}
	latest := w.store.latest()
	for i, e := range w.engines {
		o.checks += 3
		if e.serving < o.lastServe[i] {
			w.fail(InvMonotonic, "engine %s serves version %d after %d", e.id, e.serving, o.lastServe[i])
			return
		}
		o.lastServe[i] = e.serving
		if !w.store.committed(e.serving) {
			w.fail(InvInvisible, "engine %s serves version %d whose manifest is not committed", e.id, e.serving)
			return
		}
		if want := w.store.checksum(e.serving); e.loadedSum != want {
			w.fail(InvChecksum, "engine %s serves version %d with weights checksum %s, manifest says %s", e.id, e.serving, short(e.loadedSum), short(want))
			return
		}
	}
	w.ctl.checkBooks()
	o.checks++
	if w.ctl.minVersion > latest {
		w.fail(InvInvisible, "router's minimum version %d is above the newest committed version %d", w.ctl.minVersion, latest)
		return
	}
	if w.finished {
		return
	}
	if b := w.ctl.buf; b.lost && w.ctl.down == 0 {
		o.checks++
		if bound := stepDownBound(w.cfg); now-b.lostAt > bound {
			w.fail(InvTermStepDown, "the controller's trajectory buffer was lost at %.3fs and its term has not stepped down %v later (bound %v: UnhealthyAfter + probe interval)",
				b.lostAt.Seconds(), (now - b.lostAt).Round(time.Millisecond), bound)
			return
		}
	}
	f := w.faults
	o.checks++
	if f.active == 0 {
		since := now - max(o.lastStepAt, f.lastHeal)
		if since > w.cfg.ProgressBound {
			w.fail(InvProgress, "no trainer step completed for %v with every fault healed (last step %d at %.3fs; rolling out %d, unsettled %d)",
				since.Round(time.Millisecond), o.steps, o.lastStepAt.Seconds(), len(w.ctl.groups), len(w.ctl.led.unsettled))
			return
		}
		if now-f.lastHeal >= w.cfg.SyncBound {
			want := w.store.latestAt(now - w.cfg.SyncBound)
			for _, e := range w.engines {
				o.checks++
				if e.serving < want {
					w.fail(InvSync, "engine %s serves version %d, %v after faults healed; version %d was published more than %v ago",
						e.id, e.serving, (now - f.lastHeal).Round(time.Millisecond), want, w.cfg.SyncBound)
					return
				}
			}
		}
	}
	if limit := 20*w.wl.Horizon + time.Minute; now > limit {
		w.fail(InvProgress, "run did not finish %d steps within %v of virtual time (trained %d)", w.cfg.Steps, limit, o.steps)
	}
}

// final runs once, after the settle period that follows the last step.
func (o *oracle) final() {
	w := o.w
	latest := w.store.latest()
	o.checks++
	if o.w.in.stalePolicy == staleness.PolicyAccept && o.staleTrained > w.ctl.violations {
		w.fail(InvStaleness, "stale_policy accept: %d groups were trained beyond S=%d, the controller counted %d violations", o.staleTrained, w.wl.S, w.ctl.violations)
		return
	}
	if latest != int64(w.cfg.Steps) {
		w.fail(InvSync, "publisher's newest committed version is %d, trainer produced %d", latest, w.cfg.Steps)
		return
	}
	for _, e := range w.engines {
		o.checks++
		if e.serving != latest {
			w.fail(InvSync, "engine %s serves %d, %v after the last step; latest is %d", e.id, e.serving, w.cfg.SyncBound+time.Second, latest)
			return
		}
	}
	// Nothing lost: every prompt taken from the dataset is trained,
	// filtered, requeued and waiting in the controller's source, or held
	// in flight by the controller.
	queued := map[string]int{}
	for _, p := range w.ctl.queuedPrompts() {
		queued[p]++
	}
	held := w.ctl.heldGroups()
	names := make([]string, 0, len(o.prompts))
	for p := range o.prompts {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		op := o.prompts[p]
		o.checks++
		n := 0
		var states []string
		if op.final != "" {
			n++
			states = append(states, op.final)
		}
		if op.live != "" {
			n++
			states = append(states, "in flight as "+op.live)
			if !held[op.live] {
				w.fail(InvLedger, "prompt %s: group %s is in flight but the controller no longer holds it (lost)", p, op.live)
				return
			}
		}
		if op.queued {
			n++
			states = append(states, "requeued")
			if queued[p] != 1 {
				w.fail(InvLedger, "prompt %s was requeued but appears %d times in the prompt source", p, queued[p])
				return
			}
		}
		if n != 1 {
			w.fail(InvLedger, "prompt %s ends in %d states: %s", p, n, strings.Join(states, ", "))
			return
		}
	}
	qs := make([]string, 0, len(queued))
	for p := range queued {
		qs = append(qs, p)
	}
	sort.Strings(qs)
	for _, p := range qs {
		if op, n := o.prompts[p], queued[p]; op == nil || !op.queued || n != 1 {
			w.fail(InvLedger, "prompt source holds %s %d times but the ledger does not have it requeued once", p, n)
			return
		}
	}
}

func short(s string) string {
	if len(s) > 20 {
		return s[:20] + "…"
	}
	return s
}

// describe is the oracle's one-line account for summaries.
