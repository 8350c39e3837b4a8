package messages

// Trainer flow: the trainer receives accepted groups as mini-batches, trains
// one step and announces the new policy version.

// TrainBatch is one mini-batch handed to a trainer backend. Version: the
// policy version being trained (the step produces Version+1).
type TrainBatch struct {
	Header
	Step     int64    `cbor:"10,keyasint,omitempty"`
	GroupIDs []string `cbor:"11,keyasint,omitempty"`
	Batch    BatchRef `cbor:"12,keyasint,omitempty"`
	// Tokens and Trajectories size the batch without fetching it.
	Tokens       int64 `cbor:"13,keyasint,omitempty"`
	Trajectories int32 `cbor:"14,keyasint,omitempty"`
}

func (TrainBatch) Kind() Kind { return KindTrainBatch }
func (m TrainBatch) String() string {
	b := m.Batch
	return newLine("TrainBatch", m.Header).i64("step", m.Step).strs("groups", m.GroupIDs).
		ref("batch", &b).i64("tokens", m.Tokens).i64("trajs", int64(m.Trajectories)).done()
}

// StepDone: a training step finished. Version: the version trained on;
// NewVersion (normally Version+1) is what the publisher must ship next.
type StepDone struct {
	Header
	Step       int64   `cbor:"10,keyasint,omitempty"`
	NewVersion int64   `cbor:"11,keyasint,omitempty"`
	Loss       float64 `cbor:"12,keyasint,omitempty"`
	RewardMean float64 `cbor:"13,keyasint,omitempty"`
	// Stats carries further scalars (grad_norm, kl, entropy, ...). CBOR map
	// keys are sorted on encode and String() sorts them too.
	Stats map[string]float64 `cbor:"14,keyasint,omitempty"`
}

func (StepDone) Kind() Kind { return KindStepDone }
func (m StepDone) String() string {
	return newLine("StepDone", m.Header).i64("step", m.Step).i64("new_v", m.NewVersion).
		f64("loss", m.Loss).f64("reward_mean", m.RewardMean).f64map("stats", m.Stats).done()
}
