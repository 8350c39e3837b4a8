package simcov

import "strings"

// Exclusion names blocks no simulated input can reach: the blocks of
// function Func in File (Func "*.name" matches every method called name)
// whose source — the block's first line in full, then its text — contains
// Contains (every block of the function when Contains is empty; "=x"
// matches a block whose text, without spaces and braces, is exactly x;
// "^x" a block whose first line contains x: the body of an if or a case
// starts on the line of its condition).
type Exclusion struct {
	File, Func, Contains, Why string
}

// The reasons, shared by many blocks.
const (
	whyConfig        = "a configuration error: the simulator builds every core from a valid config (each error has a test in the core's package)"
	whyPanic         = "a panic on a broken internal invariant: the simulator reports any panic in a core as a protocol violation"
	whyPlanted       = "a planted bug's branch (Config.Plant): reached by the planted-bug tests, not by the correct core the coverage is measured on"
	whyMarker        = "an interface marker method: never called, it only closes the set of types"
	whyFormat        = "formatting for tests and debugging that no shell (real or simulated) calls"
	whySkyRL         = "SkyRL's batch-level function (filter.Accumulator, filter.Replace, filter.KeepIndices): the loop judges group by group (Config.Decide) and assembles mini-batches in the controller; no actor calls it (filter's SkyRL tests do)"
	whyHeld          = "the controller core calls it only for a group it holds in that state, and panics otherwise (a broken invariant)"
	whyStepAhd       = "a StepDone ahead of the controller: never provoked in a correct loop (the simulator fails the run on the controller's stepahead log)"
	whyMerge         = "the rollout side's token batches always decode and share one spec; a merge failure would be a codec bug (the simulator fails the run on the merge log)"
	whyEndless       = "a prompt source that runs out: no production source does (task sources sample for ever; bench/scale's bounded one is a benchmark)"
	whyCommand       = "the publisher shell joins an engine before it commands or acks it, and names only committed versions, in order"
	whyAccessor      = "an accessor no shell calls (the core's tests read it)"
	whyRefuse        = "a batch ahead of the trainer: a correct controller never sends one (the simulator fails the run on it as a protocol violation)"
	whyNoRetry       = "the rule without a Retry (New): no shell builds it — the trainer actor and the simulator's trainer use NewRetrying (steprule's TestRule covers it)"
	whyOutOfOrder    = "an input the stage refuses (ErrOutOfOrder): the shells end each episode once and pack and store only at those stages (the refusals have tests in the core's package)"
	whyDefaultWindow = "a fetch window other than the default: every shell that builds a trainer.StreamSource leaves RetryFor 0, as the simulator's trainer does (fetchrule's TestWindow covers the others)"
	whyWouldDrop     = "replace mode requeues every group CheckForTraining would drop just before (requeueStale: WouldDrop is the same test at the same instant), so no good group is found stale at its check"
)

// The lease core's reasons.
const (
	whyOneKV      = "the simulated lease KV is one linearizable server: no read comes from a replica behind a write the server has refused, which the elector reads again (contender's TestJudgeRefusal covers the verdict)"
	whyLateAnswer = "an answer after the local deadline finds the core stepped down only when something ticked it while the call was in flight — another goroutine's Status (cluster.NameGuard.Held); the trainer lease's elector, which the simulator models, ticks its core only before and after each call, and a renewal answered in time keeps a term the server kept (TestCoreLateAnswerAfterDeadlineStaysDown)"
)

// Unreachable are the blocks of the cores that no simulated input can
// reach, each with its reason. A block listed here that a seed does reach
// is reported (Report.Details marks it, and TestExclusionsUnreached fails),
// so the list cannot silently go stale.
var Unreachable = []Exclusion{
	// cluster/term
	{File: "cluster/term/core.go", Func: "Config.Validate", Contains: "ErrBadConfig", Why: whyConfig},
	{File: "cluster/term/core.go", Func: "New", Contains: "return nil, err", Why: whyConfig},
	{File: "cluster/term/core.go", Func: "New", Contains: "cfg.Watch.StartAfter = 0", Why: whyPlanted},
	{File: "cluster/term/core.go", Func: "PromptTokenOf", Contains: "return 0, false", Why: "an id PromptID did not make: the durable ledger holds only ids PromptID made"},
	{File: "cluster/term/core.go", Func: "(*Core).claimed", Contains: "panic(err)", Why: "defensive: the watch's config was validated by New"},
	{File: "cluster/term/core.go", Func: "(*Core).claimed", Contains: "case c.cfg.Plant.ForgetPrevHolder", Why: whyPlanted},
	{File: "cluster/term/core.go", Func: "(*Core).claimed", Contains: "RequeueNode{", Why: whyPlanted},
	{File: "cluster/term/core.go", Func: "(*Core).fail", Contains: "=return", Why: "defensive: fail is called only while holding (a term-scoped input of a standby is ignored before it)"},
	{File: "cluster/term/core.go", Func: "(*Core).termInput", Contains: "t.saving.p.Step", Why: whyPlanted},
	{File: "cluster/term/core.go", Func: "(*Core).Step", Contains: "case NodeRequeued", Why: whyPlanted + " (NodeRequeued answers the planted RequeueNode)"},
	{File: "cluster/term/input.go", Func: "tokenOf", Contains: "case NodeRequeued", Why: whyPlanted + " (NodeRequeued answers the planted RequeueNode)"},
	{File: "cluster/term/input.go", Func: "*.isInput", Why: whyMarker},
	{File: "cluster/term/effect.go", Func: "*.isEffect", Why: whyMarker},
	{File: "cluster/term/effect.go", Func: "Kind.String", Contains: "kind(%d)", Why: "every Kind has a name"},
	{File: "cluster/term/effect.go", Func: "Event.String", Contains: `"term event "`, Why: "every Kind has its own line"},
	{File: "cluster/term/effect.go", Func: "Event.String", Contains: "prompts %s had in flight", Why: whyPlanted + " (a PromptsRequeued naming a node answers the planted RequeueNode)"},
	{File: "cluster/term/effect.go", Func: "Ready.String", Why: whyFormat},
	{File: "cluster/term/steps.go", Func: "(*Core).trySave", Contains: "c.trySaveAll()", Why: whyPlanted},
	{File: "cluster/term/steps.go", Func: "(*Core).trySaveAll", Why: whyPlanted},
	{File: "cluster/term/steps.go", Func: "(*Core).saveEffects", Contains: "MarkTrained{", Why: whyPlanted},
	{File: "cluster/term/steps.go", Func: "(*Core).progressSaved", Contains: "t.sent = t.sent[1:]", Why: whyPlanted},
	{File: "cluster/term/steps.go", Func: "(*Core).resend", Contains: "=return", Why: whyPlanted},

	// cluster/lease/contender
	{File: "cluster/lease/contender/timing.go", Func: "Timing.Validate", Contains: "ErrBadConfig", Why: whyConfig},
	{File: "cluster/lease/contender/core.go", Func: "NewCore", Contains: "return nil, err", Why: whyConfig},
	{File: "cluster/lease/contender/core.go", Func: "(*Core).Timing", Why: whyAccessor},
	{File: "cluster/lease/contender/core.go", Func: "", Contains: "panic(", Why: whyPanic},
	{File: "cluster/lease/contender/core.go", Func: "Op.String", Contains: `"none"`, Why: "the simulated elector logs only the ops it made (acquire, renew)"},
	{File: "cluster/lease/contender/core.go", Func: "Op.String", Contains: "Op(%d)", Why: "every Op has a name"},
	{File: "cluster/lease/contender/key.go", Func: "Refusal.String", Contains: "Refusal(%d)", Why: "every Refusal has a name"},
	{File: "cluster/lease/contender/key.go", Func: "Decode", Contains: "return Holding{}", Why: "the simulated key holds only values Encode wrote (a foreign value is the elector's decode error, tested in cluster/lease/contender)"},
	{File: "cluster/lease/contender/key.go", Func: "JudgeRefusal", Contains: "return RefusalReadAgain", Why: whyOneKV},
	{File: "cluster/lease/contender/key.go", Func: "Refusal.String", Contains: `"read again"`, Why: whyOneKV},
	{File: "cluster/lease/contender/core.go", Func: "(*Core).Renewed", Contains: "the local deadline passed while", Why: whyLateAnswer},
	{File: "cluster/lease/contender/core.go", Func: "(*Core).Resynced", Contains: "the local deadline passed meanwhile", Why: whyLateAnswer},
	// cluster/rankhost/fence
	{File: "cluster/rankhost/fence/rule.go", Func: "(*Rule).take", Contains: "=returncmp.Compare(a.Group,b.Group)", Why: "take orders the groups it ends when it ends two or more at once; a host whose shell carries the rule out holds at most one group (the rule's invariant, the failover scenario's rank-fencing oracle), so no call ends two (fence's TestRule does, with groups the simulator never places together)"},

	// actors/controller
	{File: "actors/controller/core.go", Func: "Config.Validate", Contains: "ErrInvalidConfig", Why: whyConfig},
	{File: "actors/controller/core.go", Func: "New", Contains: "return nil", Why: whyConfig},
	{File: "actors/controller/resume.go", Func: "Resume", Contains: "return nil", Why: "an inconsistent Recovery: the simulator's ledger builds consistent ones (resume_test covers each refusal)"},
	{File: "actors/controller/core.go", Func: "", Contains: "panic(", Why: whyPanic},
	{File: "actors/controller/sampling.go", Func: "", Contains: "panic(", Why: whyPanic},
	{File: "actors/controller/core.go", Func: "(*Core).Step", Contains: `"unexpected"`, Why: "defensive: the controller's shell subscribes only to the four message kinds it steps"},
	{File: "actors/controller/core.go", Func: "(*Core).stepDone", Contains: `"stepahead"`, Why: whyStepAhd},
	{File: "actors/controller/core.go", Func: "(*Core).send", Contains: `"merge"`, Why: whyMerge},
	{File: "actors/controller/sampling.go", Func: "(*Core).merge", Contains: "return merged{}", Why: whyMerge},
	{File: "actors/controller/sampling.go", Func: "(*Core).trainable", Contains: "^if err != nil", Why: whyMerge},
	{File: "actors/controller/core.go", Func: "(*Core).admit", Contains: "c.exhausted = true", Why: whyEndless},
	{File: "actors/controller/core.go", Func: "(*Core).admit", Contains: "default:", Why: whyEndless},
	{File: "actors/controller/resume.go", Func: "(*Core).recover", Contains: "c.lastTrain = nil", Why: "ResendTrainAfter 0 (never resend): the simulated controller always resends, or a lost batch would deadlock the run"},
	{File: "actors/controller/resume.go", Func: "(*Core).enqueue", Contains: "=return", Why: whyPlanted},
	{File: "actors/controller/core.go", Func: "(*Core).aborted", Contains: "c.enqueue(queued{", Why: whyPlanted},
	{File: "actors/controller/sampling.go", Func: "(*Core).dispatchReplace", Contains: `=c.requeues("")continue`, Why: whyWouldDrop},
	{File: "actors/controller/sampling.go", Func: "(*Core).dispatchReplace", Contains: "^if len(chosen) == 0", Why: whyWouldDrop},
	{File: "actors/staleness/config.go", Func: "Config.Validate", Contains: "ErrInvalidConfig", Why: whyConfig},
	{File: "actors/staleness/config.go", Func: "DefaultConfig", Why: "a constructor the controller core does not call (its callers build the Config)"},
	{File: "actors/staleness/config.go", Func: "Config.measure", Contains: "return MeasureScheduled", Why: "an empty measure: every caller names one"},
	{File: "actors/staleness/controller.go", Func: "New", Contains: "return nil, err", Why: whyConfig},
	{File: "actors/staleness/controller.go", Func: "resume", Contains: "return nil", Why: whyConfig},
	{File: "actors/staleness/controller.go", Func: "(*Controller).check", Contains: "panic(", Why: whyPanic},
	{File: "actors/staleness/controller.go", Func: "GroupState.String", Contains: "state(", Why: "there are two states"},
	{File: "actors/staleness/controller.go", Func: "Verdict.String", Why: whyFormat},
	{File: "actors/staleness/controller.go", Func: "Requeue.String", Why: whyFormat},
	{File: "actors/staleness/controller.go", Func: "Decision.String", Why: whyFormat},
	{File: "actors/staleness/controller.go", Func: "(*Controller).Config", Why: whyAccessor},
	{File: "actors/staleness/controller.go", Func: "(*Controller).Groups", Why: whyAccessor},
	{File: "actors/staleness/controller.go", Func: "(*Controller).TryAcquire", Contains: "return Admission{}, false", Why: "the controller core acquires only while Capacity() > 0 (it panics otherwise)"},
	{File: "actors/staleness/controller.go", Func: "(*Controller).Filter", Contains: "return err", Why: whyHeld},
	{File: "actors/staleness/controller.go", Func: "(*Controller).Release", Contains: "return err", Why: whyHeld},
	{File: "actors/staleness/controller.go", Func: "(*Controller).Consume", Contains: "return err", Why: whyHeld},
	{File: "actors/staleness/controller.go", Func: "(*Controller).CheckForTraining", Contains: "return Decision{}, err", Why: whyHeld},
	{File: "actors/staleness/controller.go", Func: "(*Controller).WouldDrop", Contains: "return false, err", Why: whyHeld},
	{File: "actors/staleness/controller.go", Func: "(*Controller).StepDone", Contains: "ErrStepAhead", Why: whyStepAhd},
	{File: "actors/staleness/controller.go", Func: "(*Controller).CheckForTraining", Contains: "c.futureVersions++", Why: "a token newer than the trainer: the simulated trainer trains only batches the controller sent, so no engine serves a version the controller's step has not reached (in a cluster, another term's trainer could)"},

	// actors/sampling + actors/filter
	{File: "actors/sampling/core.go", Func: "Config.Validate", Contains: "ErrInvalidConfig", Why: whyConfig},
	{File: "actors/sampling/core.go", Func: "New", Contains: "return nil, err", Why: whyConfig},
	{File: "actors/sampling/core.go", Func: "(*Core).Tick", Why: "the core arms no timers, so no shell ticks it"},
	{File: "actors/sampling/core.go", Func: "(*Core).Step", Contains: "=return", Why: "defensive: the shell feeds it only GroupReady"},
	{File: "actors/sampling/held.go", Func: "(*Held).Len", Why: "read only by the sampling shell's Released() count (held_test reads it)"},
	{File: "actors/sampling/held.go", Func: "Reference", Contains: "return g, false", Why: "every simulated group is stored with its batch inline, as the rollout actor publishes it (held_test covers a reference and an empty batch)"},
	{File: "actors/sampling/held.go", Func: "Reference", Contains: "b.Bytes = int64", Why: "the simulated rollout packs the batch's size, as the rollout actor does; the default serves a publisher that packs none (held_test)"},
	{File: "actors/sampling/held.go", Func: "Reference", Contains: "b.Checksum = messages", Why: "the simulated rollout packs the batch's checksum, as the rollout actor does; the default serves a publisher that packs none (held_test)"},
	{File: "actors/filter/accumulate.go", Func: "", Why: whySkyRL},
	{File: "actors/filter/replace.go", Func: "Replace", Why: whySkyRL},
	{File: "actors/filter/sample.go", Func: "good", Why: whySkyRL},
	{File: "actors/filter/sample.go", Func: "KeepIndices", Why: whySkyRL},
	{File: "actors/filter/replace.go", Func: "ReplaceSlots", Contains: "return false, nil", Why: "the controller calls it with ratio 0 and at least one fresh group"},
	{File: "actors/filter/config.go", Func: "Config.Validate", Contains: "ErrInvalidConfig", Why: whyConfig},
	{File: "actors/filter/sample.go", Func: "GroupDecision.String", Why: whyFormat},
	{File: "actors/filter/sample.go", Func: "Config.Decide", Contains: "in one group", Why: "the sampling core judges one group, under one uid"},
	{File: "actors/filter/sample.go", Func: "Config.Decide", Contains: "ErrInvalidConfig", Why: whyConfig},

	// actors/publisher/tracker (the version tracker)
	{File: "actors/publisher/tracker/tracker.go", Func: "Config.Validate", Contains: "publisher: Config", Why: whyConfig},
	{File: "actors/publisher/tracker/tracker.go", Func: "New", Contains: "return nil, err", Why: whyConfig},
	{File: "actors/publisher/tracker/tracker.go", Func: "(*Tracker).Publish", Contains: "return nil, fmt.Errorf", Why: "the publisher publishes each committed version once, in order, with its sizes"},
	{File: "actors/publisher/tracker/tracker.go", Func: "(*Tracker).plan", Contains: "=deltas=falsebreak", Why: "only Tinker's version mode publishes NoDelta versions (whole sampler checkpoints); the simulated trainer's versions are deltas"},
	{File: "actors/publisher/tracker/tracker.go", Func: "(*Tracker).AddFull", Why: "no publisher shell calls it: full checkpoints are published with their version (VersionInfo.FullBytes)"},
	{File: "actors/publisher/tracker/tracker.go", Func: "(*Tracker).Join", Contains: "return Command{}, fmt.Errorf", Why: whyCommand},
	{File: "actors/publisher/tracker/tracker.go", Func: "(*Tracker).Fetching", Contains: "return fmt.Errorf", Why: whyCommand},
	// Ack's unknown engine is reached: in failover an engine's ack may
	// reach its term's publisher after the engine left the term.
	{File: "actors/publisher/tracker/tracker.go", Func: "(*Tracker).Ack", Contains: "ErrUnknownVersion", Why: whyCommand},
	{File: "actors/publisher/tracker/tracker.go", Func: "(*Tracker).Plan", Contains: "return Plan{}, fmt.Errorf", Why: whyCommand},
	{File: "actors/publisher/tracker/tracker.go", Func: "(*Tracker).check", Contains: "panic(", Why: whyPanic},
	{File: "actors/publisher/tracker/ready.go", Func: "Outcome.String", Contains: "outcome(", Why: "an Outcome the tracker never makes (the formatting's guard)"},
	{File: "actors/publisher/tracker/ready.go", Func: "Ready.Empty", Why: whyFormat},
	{File: "actors/publisher/tracker/ready.go", Func: "Ready.String", Why: whyFormat},
	{File: "actors/publisher/tracker/ready.go", Func: "(*Tracker).Awaiting", Why: whyAccessor},
	{File: "actors/publisher/tracker/ready.go", Func: "(*Tracker).Failed", Why: "the simulated engines are a cluster's (engine hosts): a load that fails is only logged on the host (cluster/enginehost's hostReporter) and the holder's publisher learns from acks alone; an in-process engine's agent reports it (cluster/weightsync.Agent → the publisher Shell), tested in actors/publisher and the tracker's scenarios"},
	{File: "actors/publisher/tracker/ready.go", Func: "(*Tracker).Await", Contains: "return fmt.Errorf", Why: whyCommand},
	{File: "actors/publisher/tracker/ready.go", Func: "(*Tracker).PublishAwait", Contains: "return nil, err", Why: "the publisher publishes each committed version once, in order, with its sizes"},

	// actors/trainer/fetchrule
	{File: "actors/trainer/fetchrule/rule.go", Func: "Rule.Window", Contains: "return 0", Why: whyDefaultWindow},
	{File: "actors/trainer/fetchrule/rule.go", Func: "Rule.Window", Contains: "=returnr.RetryFor", Why: whyDefaultWindow},

	// actors/trainer/steprule
	{File: "actors/trainer/steprule/core.go", Func: "*.input", Why: whyMarker},
	{File: "actors/trainer/steprule/core.go", Func: "*.effect", Why: whyMarker},
	{File: "actors/trainer/steprule/core.go", Func: "Train.String", Why: whyFormat},
	{File: "actors/trainer/steprule/core.go", Func: "Publish.String", Why: whyFormat},
	{File: "actors/trainer/steprule/core.go", Func: "Announce.String", Why: whyFormat},
	{File: "actors/trainer/steprule/core.go", Func: "Ready.String", Why: whyFormat},
	{File: "actors/trainer/steprule/core.go", Func: "Refuse.String", Why: whyRefuse},
	{File: "actors/trainer/steprule/core.go", Func: "Refuse.Err", Why: whyRefuse},
	{File: "actors/trainer/steprule/core.go", Func: "(*Core).next", Contains: "Refuse{", Why: whyRefuse},
	{File: "actors/trainer/steprule/core.go", Func: "Retry.Validate", Contains: "return fmt.Errorf", Why: whyConfig},
	{File: "actors/trainer/steprule/core.go", Func: "NewRetrying", Contains: "return nil, err", Why: whyConfig},
	{File: "actors/trainer/steprule/core.go", Func: "New", Why: whyNoRetry},
	{File: "actors/trainer/steprule/core.go", Func: "(*Core).publishFailed", Contains: "=return", Why: whyNoRetry},
	{File: "actors/trainer/steprule/core.go", Func: "(*Core).next", Contains: "c.emit(Publish{", Why: whyNoRetry},
	{File: "actors/trainer/steprule/core.go", Func: "(*Core).Tick", Contains: "=return", Why: "a tick before the wait is over: the simulator ticks the rule only at the RetryAt it asked for (a timer on the virtual clock); the trainer actor's 50 ms ticks reach it (steprule's TestRetryWithBackoff)"},
	{File: "actors/trainer/steprule/core.go", Func: "(*Core).Step", Contains: "=return", Why: "a late or duplicated Trained/Failed: the simulated trainer reports each Train and Publish once, and a crashed incarnation's reports die with its rule (steprule's TestRule covers them)"},

	// actors/rollout/outcome
	{File: "actors/rollout/outcome/outcome.go", Func: "Stage.String", Why: "formatting of a refused input's error: the shells (the actor's runGroup, the simulator's groups) never make one"},
	{File: "actors/rollout/outcome/outcome.go", Func: "*.Ended", Contains: "ErrOutOfOrder", Why: whyOutOfOrder},
	{File: "actors/rollout/outcome/outcome.go", Func: "*.Packed", Contains: "ErrOutOfOrder", Why: whyOutOfOrder},
	{File: "actors/rollout/outcome/outcome.go", Func: "*.Stored", Contains: "ErrOutOfOrder", Why: whyOutOfOrder},
	{File: "actors/rollout/outcome/outcome.go", Func: "*.Packed", Contains: `"pack: "`, Why: "a packing error: the simulated groups always pack (their token batches are built from what the engines produced; the actor's pack errors have tests in actors/rollout)"},
	{File: "actors/rollout/outcome/outcome.go", Func: "*.Packed", Contains: "=g.stage=Ready", Why: "a group published without a trajectory buffer: both simulated worlds model a cluster term's rollouts, which store every group in the term's buffer (the actor without a GroupStream has its tests in actors/rollout)"},
	{File: "actors/rollout/outcome/outcome.go", Func: "*.Aborts", Contains: "=returnnil", Why: "the shells ask for the reports only of an Aborted group"},
}

func matchExclusion(b Block, line, src string) *Exclusion {
	for i := range Unreachable {
		e := &Unreachable[i]
		if e.File != b.File || !funcMatches(e.Func, b.Func) {
			continue
		}
		switch {
		case e.Contains == "":
			return e
		case strings.HasPrefix(e.Contains, "="):
			if normalize(src) == e.Contains[1:] {
				return e
			}
		case strings.HasPrefix(e.Contains, "^"):
			if strings.Contains(line, e.Contains[1:]) {
				return e
			}
		case strings.Contains(line+"\n"+src, e.Contains):
			return e
		}
	}
	return nil
}

func funcMatches(pattern, fn string) bool {
	switch {
	case pattern == "":
		return true
	case strings.HasPrefix(pattern, "*."):
		return strings.HasSuffix(fn, pattern[1:])
	}
	return pattern == fn
}

// normalize drops whitespace and braces.
func normalize(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case ' ', '\t', '\n', '{', '}':
			return -1
		}
		return r
	}, s)
}
