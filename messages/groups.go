package messages

// Group flow: finished groups go through the staleness controller and the
// dynamic-sampling filter; every prompt's fate is recorded in the ledger.

// GroupReady is a complete group of trajectories with its packed token batch.
// Version: OldestVersion (the staleness check looks at the oldest token).
//
// The rollout actor stores it, token batch inline, in the trajectory
// buffer (RunPlan.GroupStream). The sampling actor forwards a kept group
// by reference: Batch then holds the stream subject and sequence of that
// stored message (with the batch's size and checksum), not the bytes, and
// the trainer fetches it (BatchRef). Everything the controller and the
// sampling core decide on — rewards, versions, token counts, which
// trajectories train a token — stays in the message itself.
type GroupReady struct {
	Header
	GroupID       string    `cbor:"10,keyasint,omitempty"`
	PromptID      string    `cbor:"11,keyasint,omitempty"`
	TrajectoryIDs []string  `cbor:"12,keyasint,omitempty"`
	Rewards       []float64 `cbor:"13,keyasint,omitempty"`
	// OldestVersion is the minimum policy version over all its tokens.
	OldestVersion int64 `cbor:"14,keyasint,omitempty"`
	// ScheduledStep is the trainer step at which the group was admitted.
	ScheduledStep int64    `cbor:"15,keyasint,omitempty"`
	Batch         BatchRef `cbor:"16,keyasint,omitempty"`
	// Tokens is the total token count of the group (for microbatching).
	Tokens int64 `cbor:"17,keyasint,omitempty"`
	// TrainedTokens is, per trajectory (TrajectoryIDs order), how many of
	// its tokens its loss mask trains; 0 is a dead trajectory (nothing to
	// train). zero_variance_mask judges a group on its live trajectories
	// from it, without the token batch. nil (an older sender): every
	// trajectory counts as live.
	TrainedTokens []int32 `cbor:"18,keyasint,omitempty"`
}

func (GroupReady) Kind() Kind { return KindGroupReady }
func (m GroupReady) String() string {
	b := m.Batch
	return newLine("GroupReady", m.Header).str("group", m.GroupID).str("prompt", m.PromptID).
		strs("trajs", m.TrajectoryIDs).f64s("rewards", m.Rewards).i64("oldest_v", m.OldestVersion).
		i64("scheduled_step", m.ScheduledStep).ref("batch", &b).i64("tokens", m.Tokens).i32s("trained", m.TrainedTokens).done()
}

// GroupAccepted: the staleness controller admitted the group for training
// (running−1, accepted+1). Version: the group's oldest version.
type GroupAccepted struct {
	Header
	GroupID  string `cbor:"10,keyasint,omitempty"`
	PromptID string `cbor:"11,keyasint,omitempty"`
	// Step is the trainer step current at acceptance; Staleness = Step − scheduled step.
	Step      int64 `cbor:"12,keyasint,omitempty"`
	Staleness int64 `cbor:"13,keyasint,omitempty"`
}

func (GroupAccepted) Kind() Kind { return KindGroupAccepted }
func (m GroupAccepted) String() string {
	return newLine("GroupAccepted", m.Header).str("group", m.GroupID).str("prompt", m.PromptID).
		i64("step", m.Step).i64("staleness", m.Staleness).done()
}

// FilterReason says why the dynamic-sampling filter dropped a group.
type FilterReason string

const (
	FilterZeroVariance     FilterReason = "zero_variance"     // all scores equal (DAPO filter)
	FilterSingleTrajectory FilterReason = "single_trajectory" // one trajectory while n_samples_per_prompt > 1 (std 0)
	FilterNaN              FilterReason = "nan_score"         // a NaN score (std NaN)
	FilterReplaced         FilterReason = "replaced"          // overwritten by a good group (POLARIS replace)
	FilterResampled        FilterReason = "resampled"         // its generation batch had too few good groups (replace: discard and sample again)
	FilterSurplus          FilterReason = "surplus"           // beyond train_batch_size after truncation
	FilterEmpty            FilterReason = "empty"             // no live trajectory (loss mask all zero)
)

// GroupFiltered: the filter dropped the group and released its capacity
// (accepted−1, filtered+1). Version: the group's oldest version.
type GroupFiltered struct {
	Header
	GroupID  string       `cbor:"10,keyasint,omitempty"`
	PromptID string       `cbor:"11,keyasint,omitempty"`
	Reason   FilterReason `cbor:"12,keyasint,omitempty"`
	// ReplacedBy names the group whose trajectories took this one's place (Reason replaced).
	ReplacedBy string `cbor:"13,keyasint,omitempty"`
}

func (GroupFiltered) Kind() Kind { return KindGroupFiltered }
func (m GroupFiltered) String() string {
	return newLine("GroupFiltered", m.Header).str("group", m.GroupID).str("prompt", m.PromptID).
		str("reason", string(m.Reason)).str("replaced_by", m.ReplacedBy).done()
}

// RequeueReason says why a prompt goes back to the prompt source.
type RequeueReason string

const (
	RequeueStale        RequeueReason = "stale"         // lag beyond max staleness at train time
	RequeueAborted      RequeueReason = "aborted"       // a trajectory was aborted
	RequeueEngineFailed RequeueReason = "engine_failed" // its engine died mid-rollout
	// RequeueSampling: dynamic sampling reached max_sample_batches before
	// the group's mini-batch was full; the group is handed back untrained.
	RequeueSampling RequeueReason = "max_sample_batches"
)

// GroupRequeued: the group is discarded and its prompt will be assigned again.
// Version: the group's oldest version.
type GroupRequeued struct {
	Header
	GroupID  string        `cbor:"10,keyasint,omitempty"`
	PromptID string        `cbor:"11,keyasint,omitempty"`
	Reason   RequeueReason `cbor:"12,keyasint,omitempty"`
	// Attempt is the attempt number the prompt will get when reassigned.
	Attempt int32  `cbor:"13,keyasint,omitempty"`
	Detail  string `cbor:"14,keyasint,omitempty"`
}

func (GroupRequeued) Kind() Kind { return KindGroupRequeued }
func (m GroupRequeued) String() string {
	return newLine("GroupRequeued", m.Header).str("group", m.GroupID).str("prompt", m.PromptID).
		str("reason", string(m.Reason)).i64("attempt", int64(m.Attempt)).str("detail", m.Detail).done()
}

// SamplingExhausted: dynamic sampling (filter or replace) sampled
// max_sample_batches generation batches for one trainer step and still
// had too few good groups (SkyRL raises here). The groups it held untrained
// were requeued (GroupRequeued reason max_sample_batches), so nothing is
// lost; a run stops on it. Version: current policy version.
type SamplingExhausted struct {
	Header
	// Mode is the dynamic-sampling mode (filter or replace).
	Mode string `cbor:"10,keyasint,omitempty"`
	// Step is the trainer step the mini-batch was for.
	Step int64 `cbor:"11,keyasint,omitempty"`
	// SampleBatches generation batches of MiniBatch groups were sampled.
	SampleBatches int64 `cbor:"12,keyasint,omitempty"`
	MiniBatch     int64 `cbor:"13,keyasint,omitempty"`
	// Good is the number of good groups collected (filter) or in the last
	// generation batch (replace).
	Good int64 `cbor:"14,keyasint,omitempty"`
	// Requeued is the number of held groups handed back.
	Requeued int64 `cbor:"15,keyasint,omitempty"`
}

func (SamplingExhausted) Kind() Kind { return KindSamplingExhausted }
func (m SamplingExhausted) String() string {
	return newLine("SamplingExhausted", m.Header).str("mode", m.Mode).i64("step", m.Step).
		i64("sample_batches", m.SampleBatches).i64("mini_batch", m.MiniBatch).i64("good", m.Good).
		i64("requeued", m.Requeued).done()
}

// CapacityChanged publishes the staleness controller's counters after every
// change (SkyRL fully_async semantics). Version: current policy version.
type CapacityChanged struct {
	Header
	Capacity  int64 `cbor:"10,keyasint,omitempty"`
	Running   int64 `cbor:"11,keyasint,omitempty"`
	Accepted  int64 `cbor:"12,keyasint,omitempty"`
	Filtered  int64 `cbor:"13,keyasint,omitempty"`
	Submitted int64 `cbor:"14,keyasint,omitempty"`
	Step      int64 `cbor:"15,keyasint,omitempty"`
}

func (CapacityChanged) Kind() Kind { return KindCapacityChanged }
func (m CapacityChanged) String() string {
	return newLine("CapacityChanged", m.Header).i64("capacity", m.Capacity).i64("running", m.Running).
		i64("accepted", m.Accepted).i64("filtered", m.Filtered).i64("submitted", m.Submitted).
		i64("step", m.Step).done()
}

// LedgerState is a prompt's state in the durable prompt ledger.
type LedgerState string

const (
	LedgerConsumed LedgerState = "consumed" // taken from the dataset, in flight
	LedgerTrained  LedgerState = "trained"  // its group was trained on
	LedgerFiltered LedgerState = "filtered" // dropped by the filter (final)
	LedgerRequeued LedgerState = "requeued" // will be assigned again
)

// PromptLedger records a prompt state transition so nothing is lost across
// restarts. Version: current policy version.
type PromptLedger struct {
	Header
	PromptID string      `cbor:"10,keyasint,omitempty"`
	GroupID  string      `cbor:"11,keyasint,omitempty"`
	State    LedgerState `cbor:"12,keyasint,omitempty"`
	Step     int64       `cbor:"13,keyasint,omitempty"`
	Attempt  int32       `cbor:"14,keyasint,omitempty"`
}

func (PromptLedger) Kind() Kind { return KindPromptLedger }
func (m PromptLedger) String() string {
	return newLine("PromptLedger", m.Header).str("prompt", m.PromptID).str("group", m.GroupID).
		str("state", string(m.State)).i64("step", m.Step).i64("attempt", int64(m.Attempt)).done()
}

// TrainedTokens counts the tokens a loss mask trains: GroupReady's
// TrainedTokens entry for one trajectory (the rollout packs it, the
// controller's zero-variance rule reads it).
func TrainedTokens(mask []uint8) int32 {
	n := int32(0)
	for _, m := range mask {
		if m != 0 {
			n++
		}
	}
	return n
}
