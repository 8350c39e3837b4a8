package assemble

import (
	"fmt"

	"github.com/asyncrl/asyncrl/messages"
)

// Stats counts what Batch did.
type Stats struct {
	// Masked is how many live trajectories (some trained token) had their
	// loss mask zeroed by a ZeroMask flag.
	Masked int
}

// Batch concatenates tb's groups' token batches (data[i] for
// tb.Groups[i]) into the step's mini-batch, applying the ZeroMask flags
// and replace mode's slots.
func Batch(tb messages.TrainBatch, data [][]byte) (*messages.TokenBatch, Stats, error) {
	var st Stats
	if len(tb.Groups) == 0 {
		return nil, st, fmt.Errorf("assemble: step %d: no groups", tb.Step)
	}
	if len(data) != len(tb.Groups) {
		return nil, st, fmt.Errorf("assemble: step %d: %d batches for %d groups", tb.Step, len(data), len(tb.Groups))
	}
	trajs := make([][]messages.Trajectory, len(tb.Groups))
	var out *messages.TokenBatch
	for gi, g := range tb.Groups {
		b, err := messages.DecodeTokenBatch(data[gi])
		if err != nil {
			return nil, st, fmt.Errorf("assemble: group %s: %w", g.GroupID, err)
		}
		if out == nil {
			if out, err = messages.NewTokenBatch(b.Spec()); err != nil {
				return nil, st, fmt.Errorf("assemble: group %s: %w", g.GroupID, err)
			}
		}
		for i := range b.Len() {
			t, err := b.Trajectory(i)
			if err != nil {
				return nil, st, fmt.Errorf("assemble: group %s: %w", g.GroupID, err)
			}
			if t.GroupID != g.GroupID {
				return nil, st, fmt.Errorf("assemble: group %s: its batch holds trajectory %s of group %s", g.GroupID, t.ID, t.GroupID)
			}
			if g.ZeroMask && trains(t.LossMask) {
				t.LossMask = make([]uint8, len(t.LossMask)) // a fresh slice: t's may alias the decoded column
				st.Masked++
			}
			trajs[gi] = append(trajs[gi], t)
		}
	}
	slots := tb.Slots
	if slots == nil {
		slots = make([]messages.Slot, len(tb.Groups))
		for i := range slots {
			slots[i] = messages.Slot{Group: int32(i)}
		}
	}
	for i, sl := range slots {
		if sl.Group < 0 || int(sl.Group) >= len(tb.Groups) {
			return nil, st, fmt.Errorf("assemble: step %d: slot %d takes group %d of %d", tb.Step, i, sl.Group, len(tb.Groups))
		}
		for _, t := range trajs[sl.Group] {
			if sl.Copy {
				t.ID = fmt.Sprintf("%s~copy%d", t.ID, i)
			}
			if err := out.Append(t); err != nil {
				return nil, st, fmt.Errorf("assemble: group %s: %w", tb.Groups[sl.Group].GroupID, err)
			}
		}
	}
	return out, st, nil
}

// trains reports whether a loss mask trains any token.
func trains(mask []uint8) bool {
	for _, m := range mask {
		if m != 0 {
			return true
		}
	}
	return false
}
