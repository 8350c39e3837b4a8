package messages

import "strconv"

// Trainer flow: the trainer receives accepted groups as mini-batches, trains
// one step and announces the new policy version.

// TrainBatch is one mini-batch handed to a trainer backend. Version: the
// policy version being trained (the step produces Version+1).
//
// It carries references, not token data: one GroupRef per group (where
// its token batch is stored, and whether zero_variance_mask zeroes its
// loss masks) and, in replace mode, the slots the groups fill. The trainer
// fetches every referenced batch and assembles the mini-batch (package
// actors/trainer/assemble); a reference it cannot fetch fails the step.
// (Field 12 held the merged batch inline before issue 31; it is not reused.)
type TrainBatch struct {
	Header
	Step int64 `cbor:"10,keyasint,omitempty"`
	// GroupIDs are the groups the step trains, each once (Groups' ids).
	GroupIDs []string `cbor:"11,keyasint,omitempty"`
	// Tokens and Trajectories size the assembled batch without fetching
	// it (copies of replace mode included).
	Tokens       int64 `cbor:"13,keyasint,omitempty"`
	Trajectories int32 `cbor:"14,keyasint,omitempty"`
	// Groups is one reference per GroupIDs entry, in its order.
	Groups []GroupRef `cbor:"15,keyasint,omitempty"`
	// Slots, when set (replace mode), are the mini-batch's places in
	// order: each takes Groups[Group]'s trajectories; a Copy keeps the
	// group id (GRPO sees the donor group twice, as SkyRL's replaced uids
	// do) and renames its trajectories "<id>~copy<slot>". nil: each group
	// once, in order.
	Slots []Slot `cbor:"16,keyasint,omitempty"`
}

// GroupRef is one group of a TrainBatch: where its token batch is and how
// the trainer treats it.
type GroupRef struct {
	GroupID string   `cbor:"1,keyasint,omitempty"`
	Batch   BatchRef `cbor:"2,keyasint,omitempty"`
	// ZeroMask: zero_variance_mask judged the group flat (its live
	// trajectories' scores within the tolerance); the trainer zeroes the
	// loss mask of each of its trajectories, so it is carried but trains
	// no token.
	ZeroMask bool `cbor:"3,keyasint,omitempty"`
}

// Slot is one place of a replace-mode mini-batch (TrainBatch.Slots).
type Slot struct {
	Group int32 `cbor:"1,keyasint,omitempty"`
	Copy  bool  `cbor:"2,keyasint,omitempty"`
}

func (TrainBatch) Kind() Kind { return KindTrainBatch }
func (m TrainBatch) String() string {
	l := newLine("TrainBatch", m.Header).i64("step", m.Step).strs("groups", m.GroupIDs).
		i64("tokens", m.Tokens).i64("trajs", int64(m.Trajectories))
	l = list(l, "refs", m.Groups, func(b []byte, g GroupRef) []byte {
		b = strconv.AppendQuote(b, g.GroupID)
		b = append(b, ':')
		b = appendRef(b, &g.Batch)
		if g.ZeroMask {
			b = append(b, ":zero_mask"...)
		}
		return b
	})
	if m.Slots != nil {
		l = list(l, "slots", m.Slots, func(b []byte, s Slot) []byte {
			b = strconv.AppendInt(b, int64(s.Group), 10)
			if s.Copy {
				b = append(b, 'c')
			}
			return b
		})
	}
	return l.done()
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
