package term

// Input is one thing that happened, fed to Core.Step. The set is closed:
// the types below.
type Input interface{ isInput() }

// Progress is the durable trainer progress as the ledger stores it
// (cluster/ledger.Progress; the shell converts).
type Progress struct {
	Step, Version int64
	// Checkpoint is where the trainer checkpoint of Version lies ("" none).
	Checkpoint string
	// Token is the fencing token of the holder that wrote it.
	Token uint64
	// Holder names that holder ("" before any).
	Holder string
	// Prompts are the prompt attempts Step trained.
	Prompts []PromptAttempt
}

// PromptAttempt is one attempt of one prompt (cluster/ledger.PromptAttempt).
type PromptAttempt struct {
	Prompt, Group string
	Attempt       int32
}

// GroupRef is a group a rollout node runs, and its prompt.
type GroupRef struct{ Group, Prompt string }

// Member is a live gossip member as the core needs it.
type Member struct {
	Name string
	// Engines maps the engine names it hosts to their URLs.
	Engines map[string]string
}

// Node-scoped inputs: they concern this node whatever term runs.
type (
	// LeaseChanged: the trainer lease's elector changed its mind
	// (contender.Status). Token is the fencing token when Leader.
	LeaseChanged struct {
		Leader bool
		Token  uint64
	}
	// QuorumChanged: cluster.Quorum's verdict (may this side train).
	QuorumChanged struct{ Train bool }
	// MembersChanged: the live members (the whole list, this node's
	// included), from gossip.
	MembersChanged struct{ Members []Member }
	// ProgressObserved: the durable progress as read now (a standby polls
	// it to learn the run is complete).
	ProgressObserved struct{ Progress Progress }
	// Stop: the node stops cleanly. The shell has stopped the pipeline
	// and fed every step and ledger event it finished; the core saves
	// what it can (the lease is still held), then gives the lease up.
	Stop struct{}
)

// Term-scoped inputs carry the token of the term they belong to; one
// whose token is not the running term's is a late input of a finished
// (possibly deposed) term, and is ignored (an Ignored event).
type (
	// ProgressClaimed answers ClaimProgress: Prev is the progress before
	// the claim (the previous holder's), Claimed after it.
	ProgressClaimed struct {
		Token         uint64
		Prev, Claimed Progress
	}
	// NodeRequeued answers RequeueNode: Count prompts of Node went back.
	NodeRequeued struct {
		Token uint64
		Node  string
		Count int
	}
	// StaleRequeued answers RequeueStale: Count prompts of older terms
	// went back.
	StaleRequeued struct {
		Token uint64
		Count int
	}
	// RouterListening: the term's router listens at URL (announced).
	RouterListening struct {
		Token uint64
		URL   string
	}
	// PipelineStarted: the term's pipeline runs (its streams exist, its
	// base weights are in its bucket, an engine loaded version 0).
	PipelineStarted struct{ Token uint64 }
	// StartPhase: the term's start reached Phase (a line for the logs:
	// "checkpoint restored", "streams created", …); a start that stalls
	// is reported with the last phase it reached.
	StartPhase struct {
		Token uint64
		Phase string
	}
	// Failed: the term cannot go on (the pipeline failed, an effect failed
	// after its retries). Err says why.
	Failed struct {
		Token uint64
		Err   string
	}
	// StepTrained: the term's trainer completed local step Step, publishing
	// local version Version, from Groups.
	StepTrained struct {
		Token         uint64
		Step, Version int64
		Groups        []string
		// Reward and Mismatch are the step's mean reward and the
		// engines-vs-trainer logprob mismatch; SameVersion the mismatch over
		// the SameVersionTokens sampled at the version trained (for the
		// event).
		Reward, Mismatch, SameVersion float64
		SameVersionTokens             int64
	}
	// CheckpointSaved: the trainer checkpoint of local version Version is
	// stored at Location.
	CheckpointSaved struct {
		Token    uint64
		Version  int64
		Location string
	}
	// ProgressSaved acknowledges the SaveProgress of global step Step.
	ProgressSaved struct {
		Token uint64
		Step  int64
	}
	// SaveFailed: the SaveProgress of Step was refused (Fenced: a newer
	// holder claimed the progress) or failed after its retries.
	SaveFailed struct {
		Token  uint64
		Step   int64
		Fenced bool
		Err    string
	}
	// PromptConsumed: the term's ledger said Group runs Prompt's Attempt
	// (the mirror's consumed event, prompt id qualified by PromptID).
	PromptConsumed struct {
		Token   uint64
		Attempt PromptAttempt
	}
	// LedgerWrite: a durable-ledger write's outcome ("" ok), for the
	// term's health: a stream can answer probes while its writes fail.
	// Consumed names the group whose consumed transition the write
	// recorded (the mirror's write of the event PromptConsumed reported):
	// only once it succeeded may a durable step name the group's prompt,
	// or its trained mark would find no consumed entry to settle (issue
	// 37). Refused: the ledger answered, refusing the transition (Err
	// says why) — not ill health, but a consumed transition refused can
	// never be trained.
	LedgerWrite struct {
		Token    uint64
		Err      string
		Consumed string
		Refused  bool
	}
	// Probe: one probe of a stream the term depends on ("" healthy);
	// Moved lists the leaders moved to this node ("" the stream's own,
	// else a consumer's name).
	Probe struct {
		Token uint64
		Dep   string
		Err   string
		Moved []string
	}
	// RolloutStatus: Node's rollout actors run Groups for the term now
	// (messages.RolloutStatus).
	RolloutStatus struct {
		Token  uint64
		Node   string
		Groups []GroupRef
	}
	// EngineTarget: the term's publisher wants Engine at Version
	// (its Dispatch of a command to a remote engine).
	EngineTarget struct {
		Token   uint64
		Engine  string
		Version int64
	}
	// Marked answers MarkTrained: the trained marks of Step are written
	// (each applied, a duplicate, or refused and counted by the shell);
	// Err: they could not be written after the shell's retries.
	Marked struct {
		Token uint64
		Step  int64
		Err   string
	}
	// EngineServing: Engine serves Version of the term (its ack, as the
	// publisher saw it).
	EngineServing struct {
		Token   uint64
		Engine  string
		Version int64
	}
)

func (LeaseChanged) isInput()     {}
func (QuorumChanged) isInput()    {}
func (MembersChanged) isInput()   {}
func (ProgressObserved) isInput() {}
func (Stop) isInput()             {}
func (ProgressClaimed) isInput()  {}
func (NodeRequeued) isInput()     {}
func (StaleRequeued) isInput()    {}
func (RouterListening) isInput()  {}
func (PipelineStarted) isInput()  {}
func (StartPhase) isInput()       {}
func (Failed) isInput()           {}
func (StepTrained) isInput()      {}
func (CheckpointSaved) isInput()  {}
func (ProgressSaved) isInput()    {}
func (SaveFailed) isInput()       {}
func (PromptConsumed) isInput()   {}
func (LedgerWrite) isInput()      {}
func (Probe) isInput()            {}
func (RolloutStatus) isInput()    {}
func (EngineTarget) isInput()     {}
func (EngineServing) isInput()    {}
func (Marked) isInput()           {}

// tokenOf is a term-scoped input's token; ok false for node-scoped ones.
func tokenOf(in Input) (uint64, bool) {
	switch v := in.(type) {
	case ProgressClaimed:
		return v.Token, true
	case NodeRequeued:
		return v.Token, true
	case StaleRequeued:
		return v.Token, true
	case RouterListening:
		return v.Token, true
	case PipelineStarted:
		return v.Token, true
	case StartPhase:
		return v.Token, true
	case Failed:
		return v.Token, true
	case StepTrained:
		return v.Token, true
	case CheckpointSaved:
		return v.Token, true
	case ProgressSaved:
		return v.Token, true
	case SaveFailed:
		return v.Token, true
	case PromptConsumed:
		return v.Token, true
	case LedgerWrite:
		return v.Token, true
	case Probe:
		return v.Token, true
	case RolloutStatus:
		return v.Token, true
	case EngineTarget:
		return v.Token, true
	case EngineServing:
		return v.Token, true
	case Marked:
		return v.Token, true
	}
	return 0, false
}
