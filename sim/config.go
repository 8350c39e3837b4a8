package sim

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/asyncrl/asyncrl/actors/staleness"
)

// Sentinel errors.
var (
	// ErrInvalidConfig is wrapped by every error Config.Validate returns.
	ErrInvalidConfig = errors.New("sim: invalid config")
	// ErrViolation is wrapped by the *Violation a run returns when an
	// invariant broke.
	ErrViolation = errors.New("sim: invariant violated")
)

// Scenario selects which faults the seed may draw.
type Scenario string

// Scenarios.
const (
	// ScenarioDefault: the workload only — no faults.
	ScenarioDefault Scenario = "default"
	// ScenarioFaults: engine crash/hang/slowdown/restart, message
	// drop/duplicate/delay/reorder, trainer crash, publisher crash between
	// payload and manifest, controller crash, corrupted deltas, stale
	// metrics, loss of the server holding the trajectory buffer.
	ScenarioFaults Scenario = "faults"
	// ScenarioPartitions: network partitions between nodes, with some
	// message faults on top.
	ScenarioPartitions Scenario = "partitions"
	// ScenarioMixed: the faults of both, overlapping.
	ScenarioMixed Scenario = "mixed"
	// ScenarioFailover: trainer nodes contending for the trainer lease,
	// each deciding with the real cluster/term core, over a simulated
	// lease, progress store and ledger; the holder killed, a standby
	// taking over, rollout nodes with groups in flight dying, partitions
	// from the lease and the store, zombie holders, lossy messages
	// (failover.go).
	ScenarioFailover Scenario = "failover"
)

// Scenarios lists every scenario, in documentation order.
var Scenarios = []Scenario{ScenarioDefault, ScenarioFaults, ScenarioPartitions, ScenarioMixed, ScenarioFailover}

// ParseScenario parses a scenario name.
func ParseScenario(s string) (Scenario, error) {
	if slices.Contains(Scenarios, Scenario(s)) {
		return Scenario(s), nil
	}
	return "", fmt.Errorf("%w: scenario %q: want one of %v", ErrInvalidConfig, s, Scenarios)
}

// Bug names a planted bug. Bugs exist only so that tests can prove the
// simulator finds them; the CLI reaches them through a hidden flag.
type Bug string

// Planted bugs.
const (
	// BugRouterIgnoresGating: the router shell never forwards the minimum
	// version or the paused/updating states to the routing core.
	BugRouterIgnoresGating Bug = "router-ignores-version-gating"
	// BugFilterLeaksCapacity: a group the filter drops is never released
	// to the staleness controller (Filter is not called), so capacity
	// leaks until the loop deadlocks.
	BugFilterLeaksCapacity Bug = "filter-forgets-to-release-capacity"
	// BugTrainerRetrainsOnRestart: a restarted trainer replays the last
	// batch of its input log although that step was committed.
	BugTrainerRetrainsOnRestart Bug = "trainer-trains-twice-on-restart"
	// BugTrainerAnnouncesUnpublished: the trainer's shell reports a
	// publish that failed as a success (Trained), so the step rule
	// announces a step whose version no engine can get.
	BugTrainerAnnouncesUnpublished Bug = "trainer-announces-unpublished-step"
	// BugPublishSkipsAcks: the failover world's publish returns once its
	// version is dispatched, without waiting for the tracker to settle it
	// (an engine's ack), so a term records a step no engine serves yet.
	BugPublishSkipsAcks Bug = "publish-returns-before-an-engine-acks"
	// BugTrainerRetrainsOnRetry: the trainer's shell carries out the
	// rule's Publish (a failed publish tried again) by training the
	// step's batch again instead of publishing the weights it holds.
	BugTrainerRetrainsOnRetry Bug = "trainer-trains-again-on-retry"
	// BugTrainerFetchIgnoresElection: the trainer reads its batch's
	// groups from a trajectory buffer whose replicas elect a leader
	// instead of failing the try and waiting on the fetch rule.
	BugTrainerFetchIgnoresElection Bug = "trainer-reads-buffer-without-leader"
	// BugEngineSkipsChecksum: an engine loads a delta whose checksum
	// failed instead of refusing it.
	BugEngineSkipsChecksum Bug = "engine-skips-checksum"
	// BugStalenessFromSchedule: the controller reports no token versions
	// to the staleness controller, which then measures a group's lag from
	// the version it was scheduled at — blind to engines that served
	// older weights. A bug only under MeasureToken (planting it with no
	// Measure set selects token); under scheduled that is the rule.
	BugStalenessFromSchedule Bug = "staleness-from-schedule"
	// BugPublisherAnnouncesEarly: the publisher announces a version
	// (tracker, LoadWeights, and a minimum version it sends itself,
	// bypassing the tracker's router minimum) before its manifest is
	// committed, so a crash in between leaves an invisible version named.
	BugPublisherAnnouncesEarly Bug = "publisher-announces-before-manifest"
	// BugRequeueLosesPrompt: a requeued prompt is never put back in the
	// prompt source.
	BugRequeueLosesPrompt Bug = "requeue-loses-prompt"
	// BugEngineRestartsFromBase: a restarted engine reloads the base
	// checkpoint and serves version 0 again.
	BugEngineRestartsFromBase Bug = "engine-restarts-from-base"
	// BugPublisherForgetsLaggards: the publisher never repeats a
	// LoadWeights, so an engine that missed one stays behind until the
	// next version.
	BugPublisherForgetsLaggards Bug = "publisher-forgets-laggards"
	// BugCtlForgetsSentBatch: a restarted controller treats the batch it
	// sent before crashing as lost and requeues its groups, although the
	// trainer may still train it.
	BugCtlForgetsSentBatch Bug = "controller-forgets-sent-batch"
	// BugTermIgnoresLostBuffer: the controller never feeds its buffer's
	// failed probes to the term's watch, so a term whose trajectory
	// buffer was lost never steps down and the run stalls.
	BugTermIgnoresLostBuffer Bug = "term-ignores-lost-buffer"

	// Planted in the cluster/term core (term.Config.Plant), found by the
	// failover scenario.

	// BugTermForgetsDeadNodeGroups: a rollout node that left is forgotten
	// without its groups reported aborted (Plant.ForgetDeadNodeGroups).
	BugTermForgetsDeadNodeGroups Bug = "term-forgets-dead-node-groups"
	// BugTermForgetsPrevHolder: a claim does not requeue what the previous
	// holder had in flight (Plant.ForgetPrevHolder).
	BugTermForgetsPrevHolder Bug = "term-forgets-previous-holder"
	// BugTermRequeuesPrevHolderOnly: a claim requeues only what the
	// progress's Holder had in flight, not what the holders before it
	// left when a claimer died between its claim and its requeue
	// (Plant.RequeuePrevHolderOnly).
	BugTermRequeuesPrevHolderOnly Bug = "term-requeues-previous-holder-only"
	// BugTermMarksBeforeDurable: a step's prompts are marked trained with
	// its SaveProgress, before the store acknowledged it
	// (Plant.MarkBeforeDurable).
	BugTermMarksBeforeDurable Bug = "term-marks-trained-before-durable"
	// BugTermIgnoresFencing: a save the store refused as fenced is taken
	// as acknowledged; the deposed term goes on (Plant.IgnoreFencedSave).
	BugTermIgnoresFencing Bug = "term-ignores-fencing"
	// BugTermTwoSaves: the next step's save goes out before the
	// outstanding one was answered (Plant.TwoSavesOutstanding).
	BugTermTwoSaves Bug = "term-two-saves-outstanding"
	// BugTermNeverResends: an engine that has not acked its target is
	// never sent it again (Plant.NeverResend).
	BugTermNeverResends Bug = "term-never-resends-loadweights"
	// BugTermSavesBeforeRecorded: a step is saved (and its prompts marked
	// trained) once their consumed events were seen, before the durable
	// ledger recorded them (Plant.SaveBeforeRecorded: the core before
	// issue 37, whose marks a ledger election had refused).
	BugTermSavesBeforeRecorded Bug = "term-saves-before-consumed-durable"
	// BugTermMarksUnordered: the next step is saved while the last
	// durable step's trained marks are still being written
	// (Plant.MarksUnordered: the core before issue 37; a holder killed
	// then lost those marks for good).
	BugTermMarksUnordered Bug = "term-saves-before-marks-written"
	// BugTermNoStartBound: a term whose start hangs (its engines never
	// follow it) is not stepped down until StallAfter
	// (Plant.NoStartBound: the core before issue 37).
	BugTermNoStartBound Bug = "term-ignores-stalled-start"

	// Planted in the failover scenario's lease elector (issue 31).

	// BugElectorTakesAnyCreate: after a refused Create the elector takes
	// any Create not yet renewed for its own that landed, without looking
	// whose it is (holder and instance: the judgment contender.JudgeTaken
	// makes), and confirms it — renewing at a newer holder's revision,
	// which the KV accepts: it steals a lease that is held.
	BugElectorTakesAnyCreate Bug = "elector-takes-any-create"
	// BugElectorTakesEarlierLifesCreate: after a refused Create the
	// elector takes up a Create of its own node's name not yet renewed as
	// its own whatever its instance — a Create of the node's earlier
	// life, or of the elector its last term resigned — as JudgeTaken did
	// before the key named the instance.
	BugElectorTakesEarlierLifesCreate Bug = "elector-takes-earlier-lifes-create"

	// Planted in the failover scenario's rank hosts (issue 31).

	// BugRankHostKeepsDeposed: a rank host's shell does not kill the
	// ranks of the groups a newer term ended (it drops the rule's Ended
	// from Observe): a deposed holder's ranks run on beside the new one's.
	BugRankHostKeepsDeposed Bug = "rank-host-keeps-deposed-ranks"
	// BugRankLinksSendNewestToken: a holder's rank requests carry the
	// newest token the lease issued, not its own term's — what a node
	// that is not the holder would need to end the holder's ranks
	// (cluster/rankhost's doc says why no real node can).
	BugRankLinksSendNewestToken Bug = "rank-links-send-newest-token"

	// Planted on inputs only issue 37's generators produce.

	// BugTermIgnoresQuorumLoss: a holder whose side lost quorum runs on
	// (term.Plant.IgnoreQuorumLoss); only the quorum-loss fault reaches it.
	BugTermIgnoresQuorumLoss Bug = "term-ignores-quorum-loss"
	// BugCtlRequeuesDuplicateAbort: the controller core queues a prompt
	// again on a second report of one group's abort
	// (controller.Plant.RequeueDuplicateAbort); only per-trajectory abort
	// reports reach it.
	BugCtlRequeuesDuplicateAbort Bug = "controller-requeues-duplicate-abort"
	// BugCtlRequeuesSweptGroup: the failover term's controller requeues a
	// dead node's group (AbortGroups) that it already requeued on the
	// group's own EpisodeAborted reports; the real controller core ignores
	// an abort of a group it no longer holds. The failover world does not
	// step the controller core: this guards the world's own model of it
	// (the core's rule is covered by actors/controller's tests and, in the
	// faults scenario, by BugCtlRequeuesDuplicateAbort).
	BugCtlRequeuesSweptGroup Bug = "controller-requeues-swept-group"
	// BugFailoverRouterIgnoresMin: the failover term's router routes to
	// an engine that acked any version of the term, ignoring the minimum
	// the term's tracker sets (the failover world before it had one).
	BugFailoverRouterIgnoresMin Bug = "failover-router-ignores-min-version"
)

// Bugs lists every planted bug.
var Bugs = []Bug{BugRouterIgnoresGating, BugFilterLeaksCapacity, BugTrainerRetrainsOnRestart, BugTrainerAnnouncesUnpublished, BugPublishSkipsAcks, BugTrainerRetrainsOnRetry, BugTrainerFetchIgnoresElection, BugEngineSkipsChecksum,
	BugStalenessFromSchedule, BugPublisherAnnouncesEarly, BugRequeueLosesPrompt, BugEngineRestartsFromBase,
	BugPublisherForgetsLaggards, BugCtlForgetsSentBatch, BugTermIgnoresLostBuffer,
	BugTermForgetsDeadNodeGroups, BugTermForgetsPrevHolder, BugTermRequeuesPrevHolderOnly, BugTermMarksBeforeDurable, BugTermIgnoresFencing,
	BugTermTwoSaves, BugTermNeverResends, BugTermSavesBeforeRecorded, BugTermMarksUnordered, BugTermNoStartBound,
	BugElectorTakesAnyCreate, BugElectorTakesEarlierLifesCreate, BugRankHostKeepsDeposed, BugRankLinksSendNewestToken, BugTermIgnoresQuorumLoss, BugCtlRequeuesDuplicateAbort,
	BugCtlRequeuesSweptGroup, BugFailoverRouterIgnoresMin}

// Config configures one simulated run. The workload shape (staleness
// bound, batch size, workers, group size, engines, turn counts) and the
// fault schedule are drawn from Seed; Config only fixes the run length,
// the scenario and how violations are reported.
type Config struct {
	// Seed seeds the one *rand.Rand everything is drawn from.
	Seed int64
	// Steps is the number of trainer steps the run must complete. ≥ 1;
	// default 10.
	Steps int
	// Scenario is default, faults, partitions or mixed.
	Scenario Scenario
	// Engines is the number of simulated engines; 0 draws 2–4 from the seed.
	Engines int
	// TraceEvents is how many of the last events a violation report
	// shows. Default 40.
	TraceEvents int
	// Minimize re-runs a failing seed with fewer faults (a minimal prefix
	// of the fault schedule, then dropping faults one by one) and reports
	// the smallest schedule that still breaks the same invariant.
	Minimize bool
	// KeepLog keeps the whole event log in Result.Log (it is always
	// hashed into Result.LogHash).
	KeepLog bool
	// ProgressBound is how long, once every fault has healed, the run may
	// go without completing a trainer step before it is declared
	// deadlocked. Default 20 s of virtual time.
	ProgressBound time.Duration
	// SyncBound is how long, once every fault has healed, an engine may
	// serve a version older than the one published SyncBound ago.
	// Default 5 s of virtual time.
	SyncBound time.Duration
	// Bugs plants bugs (tests only; see Bug).
	Bugs []Bug
	// Measure is the staleness measure the controller enforces and the
	// oracle checks (staleness ≤ S): scheduled (SkyRL: step − the step the
	// group was scheduled at; the default) or token (trainer version − the
	// group's oldest token version).
	Measure staleness.Measure

	// faultMask, when non-nil, disables the faults whose index is false
	// (delta debugging). The schedule is still drawn in full, so the
	// random stream does not shift.
	faultMask []bool
	// rankModelOff turns the failover world's rank model off (no groups,
	// no rank hosts' timers or lines): a test compares a run with the
	// model, its lines left out, against the same seed's run without it
	// (failover_ranks_test.go). Only tests set it.
	rankModelOff bool
	// noRetryExcuse: the failover progress oracle does not excuse a
	// publish's retry wait armed during a fault (the oracle before issue
	// 31's last session), for its test.
	noRetryExcuse bool
}

// DefaultConfig returns seed 1, 10 steps, the default scenario, engines
// drawn from the seed, a 40-event trace, 20 s progress bound and 5 s sync
// bound.
func DefaultConfig() Config {
	return Config{Seed: 1, Steps: 10, Scenario: ScenarioDefault, TraceEvents: 40,
		ProgressBound: 20 * time.Second, SyncBound: 5 * time.Second}
}

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Steps == 0 {
		c.Steps = d.Steps
	}
	if c.Scenario == "" {
		c.Scenario = d.Scenario
	}
	if c.TraceEvents == 0 {
		c.TraceEvents = d.TraceEvents
	}
	if c.ProgressBound == 0 {
		c.ProgressBound = d.ProgressBound
	}
	if c.SyncBound == 0 {
		c.SyncBound = d.SyncBound
	}
	if c.Measure == "" {
		c.Measure = staleness.MeasureScheduled
		if c.has(BugStalenessFromSchedule) {
			c.Measure = staleness.MeasureToken
		}
	}
	return c
}

// Validate names the first invalid field and what is allowed.
func (c Config) Validate() error {
	if c.Steps < 1 {
		return fmt.Errorf("%w: Steps %d: want ≥ 1", ErrInvalidConfig, c.Steps)
	}
	if _, err := ParseScenario(string(c.Scenario)); err != nil {
		return err
	}
	if c.Engines < 0 || c.Engines > 16 {
		return fmt.Errorf("%w: Engines %d: want 0 (drawn) to 16", ErrInvalidConfig, c.Engines)
	}
	if c.TraceEvents < 0 {
		return fmt.Errorf("%w: TraceEvents %d: want ≥ 0", ErrInvalidConfig, c.TraceEvents)
	}
	if c.ProgressBound < time.Second || c.SyncBound < time.Second {
		return fmt.Errorf("%w: ProgressBound %v / SyncBound %v: want ≥ 1s", ErrInvalidConfig, c.ProgressBound, c.SyncBound)
	}
	switch c.Measure {
	case "", staleness.MeasureScheduled, staleness.MeasureToken:
	default:
		return fmt.Errorf("%w: Measure %q: want %q or %q", ErrInvalidConfig, c.Measure, staleness.MeasureScheduled, staleness.MeasureToken)
	}
	for _, b := range c.Bugs {
		if !slices.Contains(Bugs, b) {
			return fmt.Errorf("%w: Bugs: unknown bug %q: want one of %v", ErrInvalidConfig, b, Bugs)
		}
	}
	return nil
}

// ParseBug parses a planted bug's name.
func ParseBug(s string) (Bug, error) {
	if slices.Contains(Bugs, Bug(s)) {
		return Bug(s), nil
	}
	return "", fmt.Errorf("%w: bug %q: want one of %v", ErrInvalidConfig, s, Bugs)
}

func (c Config) has(b Bug) bool { return slices.Contains(c.Bugs, b) }
