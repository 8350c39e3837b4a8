package term

import (
	"fmt"
	"strings"
	"time"

	"github.com/asyncrl/asyncrl/cluster/termwatch"
)

// Effect is one thing the shell must do, in the order Ready lists them.
// The set is closed: the types below.
type Effect interface{ isEffect() }

// Reason says why a holder gives its lease up (StepDown).
type Reason string

// The reasons a holder steps down.
const (
	// ReasonFailed: the term failed (Failed, a refused or failed save, a
	// missing checkpoint).
	ReasonFailed Reason = "failed"
	// ReasonFenced: a newer holder claimed the progress.
	ReasonFenced Reason = "fenced"
	// ReasonQuorum: this side lost quorum (or won the lease without it).
	ReasonQuorum Reason = "quorum"
	// ReasonStalled: the term's watch (termwatch) gave up on it.
	ReasonStalled Reason = "stalled"
	// ReasonStopping: the node stops cleanly.
	ReasonStopping Reason = "stopping"
)

type (
	// ClaimProgress: read the durable progress and claim it with Token
	// (ledger.Progress, then ledger.Claim); answer ProgressClaimed, or
	// Failed.
	ClaimProgress struct{ Token uint64 }
	// MarkTrained: record Prompts trained at Step in the durable ledger
	// (a duplicate is no error). Only for a step whose progress is
	// durable; answer Marked. No later step is saved until it is: the
	// durable progress names only its last step's prompts, which a new
	// holder marks at its claim, so an earlier step's marks lost with a
	// killed holder would be lost for good (issue 37).
	MarkTrained struct {
		Step    int64
		Prompts []PromptAttempt
	}
	// RequeueNode: requeue every prompt Node holds in flight in the
	// durable ledger (ledger.RequeueNode); answer NodeRequeued.
	RequeueNode struct{ Node string }
	// RequeueStale: requeue every prompt in flight in the durable ledger
	// that a term older than Token consumed (its id qualified by an older
	// token, PromptTokenOf), whichever node held it; answer StaleRequeued.
	// A claim asks for it rather than RequeueNode of the previous holder:
	// a claimer that died between its claim and its requeue overwrote the
	// progress's Holder, and what the holders before it had in flight
	// must not stay in flight.
	RequeueStale struct{ Token uint64 }
	// DeleteTermBucket: the finished term Term's weight bucket is garbage.
	DeleteTermBucket struct{ Term string }
	// StartPipeline: run the term Term (run id <run>-t<Token>) for Steps
	// steps from the claimed progress From (its checkpoint restored when
	// From.Checkpoint is set). Answer RouterListening, PipelineStarted,
	// then StepTrained, CheckpointSaved, PromptConsumed… or Failed.
	StartPipeline struct {
		Term  string
		Token uint64
		From  Progress
		Steps int64
	}
	// StopPipeline: stop the term's pipeline (idempotent). It comes
	// before the StepDown that gives the lease up.
	StopPipeline struct{ Token uint64 }
	// SaveProgress: write Progress, fenced by its Token; answer
	// ProgressSaved or SaveFailed. At most one is outstanding.
	SaveProgress struct{ Progress Progress }
	// Prune: delete the checkpoints term Token may let go now that it
	// saved global Version and the durable progress references Durable
	// (ckpt.Store.Prune).
	Prune struct {
		Version int64
		Token   uint64
		Durable string
	}
	// Announce: publish messages.TermAnnounce for Term.
	Announce struct {
		Term   string
		Token  uint64
		Router string
	}
	// AbortGroups: Node left the cluster with Groups in flight; report
	// each aborted (messages.EpisodeAborted) so the controller requeues it.
	AbortGroups struct {
		Node   string
		Groups []GroupRef
	}
	// AddEngines: register Node's engines (name → URL) with the router
	// (discovery, unhealthy at no version) and the publisher (no version).
	AddEngines struct {
		Node    string
		Engines map[string]string
	}
	// RemoveEngines: take Node's engines Names out of routing and the
	// publisher.
	RemoveEngines struct {
		Node  string
		Names []string
	}
	// SendLoadWeights: send Engine (hosted by Node) a LoadWeights to Version.
	SendLoadWeights struct {
		Node, Engine string
		Version      int64
	}
	// Finish: the run is complete: requeue whatever is still in flight in
	// the durable ledger and report its counts.
	Finish struct{ Token uint64 }
	// Done: the run is complete (close Agent.Done). Once per core.
	Done struct{}
	// StepDown: give the trainer lease up (resign).
	StepDown struct {
		Reason Reason
		// Wait is how long the node waits before it contends again;
		// FailedInARow its terms that failed since its last durable step
		// (Config.Recontend says how one gives the other).
		Wait         time.Duration
		FailedInARow int
	}
)

func (ClaimProgress) isEffect()    {}
func (MarkTrained) isEffect()      {}
func (RequeueNode) isEffect()      {}
func (RequeueStale) isEffect()     {}
func (DeleteTermBucket) isEffect() {}
func (StartPipeline) isEffect()    {}
func (StopPipeline) isEffect()     {}
func (SaveProgress) isEffect()     {}
func (Prune) isEffect()            {}
func (Announce) isEffect()         {}
func (AbortGroups) isEffect()      {}
func (AddEngines) isEffect()       {}
func (RemoveEngines) isEffect()    {}
func (SendLoadWeights) isEffect()  {}
func (Finish) isEffect()           {}
func (Done) isEffect()             {}
func (StepDown) isEffect()         {}

// Kind is an event's kind.
type Kind int

// The events a Core emits.
const (
	// LeaseAcquired: this node holds the trainer lease (Token).
	LeaseAcquired Kind = iota + 1
	// LeaseLost: the lease was lost while a term ran.
	LeaseLost
	// QuorumLost: the holder's side lost quorum; training stops.
	QuorumLost
	// Resigned: the holder gives the lease up (Reason).
	Resigned
	// TermFailed: the term cannot go on (Err).
	TermFailed
	// Resumed: the term resumes from Step, Version with Count steps to go.
	Resumed
	// StepDurable: Step (Version) is durable; Reward, Mismatch.
	StepDurable
	// RunComplete: the durable progress reached the run's steps (Step;
	// Node: the holder that trained it, when another node).
	RunComplete
	// PromptsRequeued: Count prompts Node held in flight were requeued
	// (Node "": the prompts terms before Token held, RequeueStale).
	PromptsRequeued
	// GroupsRequeued: Count groups of Node, which left, reported aborted.
	GroupsRequeued
	// Watch: the term's watch said something (Watch).
	Watch
	// LeaderMoved: the leader of Dep (or its consumer Consumer) moved to
	// this node's server.
	LeaderMoved
	// Ignored: an input that changes nothing (Err says which and why):
	// a late input of another term, a duplicate.
	Ignored
)

var kindNames = map[Kind]string{LeaseAcquired: "lease-acquired", LeaseLost: "lease-lost", QuorumLost: "quorum-lost",
	Resigned: "resigned", TermFailed: "term-failed", Resumed: "resumed", StepDurable: "step-durable",
	RunComplete: "run-complete", PromptsRequeued: "prompts-requeued", GroupsRequeued: "groups-requeued",
	Watch: "watch", LeaderMoved: "leader-moved", Ignored: "ignored"}

func (k Kind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Event is one decision, typed, for logs, metrics and tests.
type Event struct {
	Kind          Kind
	Token         uint64
	Step, Version int64
	Count         int
	Node, Dep     string
	Consumer      string
	Reason        Reason
	Err           string
	Reward        float64
	Mismatch      float64
	// SameVersion is the mismatch over the SameVersionTokens sampled at
	// the version trained (StepDurable).
	SameVersion       float64
	SameVersionTokens int64
	Watch             termwatch.Event
	// Wait: how long the node waits before it contends again (Resigned;
	// Count is its terms failed since its last durable step).
	Wait time.Duration
}

// String is the line the node prints (the prose of the agent's events).
func (e Event) String() string {
	switch e.Kind {
	case LeaseAcquired:
		return fmt.Sprintf("lease trainer acquired token %d", e.Token)
	case LeaseLost:
		return "lease trainer lost"
	case QuorumLost:
		return "lost quorum: training stops"
	case Resigned:
		if e.Count > 0 {
			return fmt.Sprintf("lease trainer resigned (%s); %d failed term(s) in a row (since its last durable step): contending again in %s",
				e.Reason, e.Count, e.Wait)
		}
		return fmt.Sprintf("lease trainer resigned (%s)", e.Reason)
	case TermFailed:
		return "training failed: " + e.Err
	case Resumed:
		return fmt.Sprintf("resume from step %d version %d (%d steps to go)", e.Step, e.Version, e.Count)
	case StepDurable:
		return fmt.Sprintf("step %d version %d reward %.3f mismatch %.4f (same-version %.2g over %d tokens)", e.Step, e.Version,
			e.Reward, e.Mismatch, e.SameVersion, e.SameVersionTokens)
	case RunComplete:
		if e.Node != "" {
			return fmt.Sprintf("run complete at step %d (trained by %s)", e.Step, e.Node)
		}
		return fmt.Sprintf("run complete at step %d", e.Step)
	case PromptsRequeued:
		if e.Node == "" {
			return fmt.Sprintf("requeued %d prompts terms before token %d had in flight", e.Count, e.Token)
		}
		return fmt.Sprintf("requeued %d prompts %s had in flight", e.Count, e.Node)
	case GroupsRequeued:
		return fmt.Sprintf("requeued %d groups %s had in flight", e.Count, e.Node)
	case Watch:
		return e.Watch.String()
	case LeaderMoved:
		if e.Consumer != "" {
			return fmt.Sprintf("leader of consumer %s/%s moved to %s", e.Dep, e.Consumer, e.Node)
		}
		return fmt.Sprintf("leader of stream %s moved to %s", e.Dep, e.Node)
	case Ignored:
		return "ignored: " + e.Err
	}
	return "term event " + e.Kind.String()
}

// Ready is what the core wants done and says since the last Advance.
type Ready struct {
	Effects []Effect
	Events  []Event
}

// Empty reports whether there is nothing to do or say.
func (r Ready) Empty() bool { return len(r.Effects) == 0 && len(r.Events) == 0 }

// String lists the effects and events, one a line (golden tests, logs).
func (r Ready) String() string {
	var b strings.Builder
	for _, e := range r.Effects {
		fmt.Fprintf(&b, "effect %T %+v\n", e, e)
	}
	for _, e := range r.Events {
		fmt.Fprintf(&b, "event %s\n", e)
	}
	return b.String()
}
