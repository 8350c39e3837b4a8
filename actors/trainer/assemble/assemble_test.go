package assemble

import (
	"slices"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/messages"
)

// group encodes a group's token batch: trajectory i has loss mask masks[i].
func group(t *testing.T, id string, masks ...[]uint8) []byte {
	t.Helper()
	tb, err := messages.NewTokenBatch(messages.BatchSpec{})
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range masks {
		n := len(m)
		tr := messages.Trajectory{ID: id + "/" + string(rune('0'+i)), GroupID: id, Reward: float32(i), PromptLen: 1,
			TokenIDs: make([]int32, n), Logprobs: make([]float32, n), LossMask: m, PolicyVersions: make([]int32, n)}
		if err := tb.Append(tr); err != nil {
			t.Fatal(err)
		}
	}
	data, err := messages.EncodeTokenBatch(tb)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func masksOf(t *testing.T, tb *messages.TokenBatch) map[string][]uint8 {
	t.Helper()
	out := map[string][]uint8{}
	for i := range tb.Len() {
		tr, err := tb.Trajectory(i)
		if err != nil {
			t.Fatal(err)
		}
		out[tr.ID] = slices.Clone(tr.LossMask)
	}
	return out
}

// TestZeroMaskZeroesExactlyItsGroup: a ZeroMask flag zeroes every loss
// mask of its group and no other; the flagged group is still carried (its
// trajectories are in the batch) and the masked count is its live
// trajectories only.
func TestZeroMaskZeroesExactlyItsGroup(t *testing.T) {
	a := group(t, "a", []uint8{0, 1, 1}, []uint8{0, 0, 1})
	b := group(t, "b", []uint8{0, 1, 1}, []uint8{0, 0, 0})
	tb := messages.TrainBatch{Step: 1, GroupIDs: []string{"a", "b"},
		Groups: []messages.GroupRef{{GroupID: "a"}, {GroupID: "b", ZeroMask: true}}}
	out, st, err := Batch(tb, [][]byte{a, b})
	if err != nil {
		t.Fatal(err)
	}
	got := masksOf(t, out)
	want := map[string][]uint8{"a/0": {0, 1, 1}, "a/1": {0, 0, 1}, "b/0": {0, 0, 0}, "b/1": {0, 0, 0}}
	for id, m := range want {
		if !slices.Equal(got[id], m) {
			t.Errorf("%s loss mask %v, want %v", id, got[id], m)
		}
	}
	if len(got) != 4 || st.Masked != 1 {
		t.Fatalf("%d trajectories, %d masked; want 4, 1 (b/1 was dead already)", len(got), st.Masked)
	}
	// The flag's zeroing must not write through to the fetched bytes: a
	// retransmitted step assembles from the same data again.
	again, _, err := Batch(messages.TrainBatch{Step: 1, Groups: []messages.GroupRef{{GroupID: "b"}}}, [][]byte{b})
	if err != nil {
		t.Fatal(err)
	}
	if m := masksOf(t, again)["b/0"]; !slices.Equal(m, []uint8{0, 1, 1}) {
		t.Fatalf("b/0 after a masked assembly: %v, want its own mask [0 1 1]", m)
	}
}

// TestSlotsCopy: replace mode's slots repeat a donor group; a copy keeps
// the group id and renames its trajectories by slot.
func TestSlotsCopy(t *testing.T) {
	a := group(t, "a", []uint8{1}, []uint8{1})
	tb := messages.TrainBatch{Step: 2, GroupIDs: []string{"a"}, Groups: []messages.GroupRef{{GroupID: "a"}},
		Slots: []messages.Slot{{Group: 0, Copy: true}, {Group: 0}}}
	out, _, err := Batch(tb, [][]byte{a})
	if err != nil {
		t.Fatal(err)
	}
	var ids, groups []string
	for i := range out.Len() {
		tr, _ := out.Trajectory(i)
		ids, groups = append(ids, tr.ID), append(groups, tr.GroupID)
	}
	if want := []string{"a/0~copy0", "a/1~copy0", "a/0", "a/1"}; !slices.Equal(ids, want) {
		t.Fatalf("ids %v, want %v", ids, want)
	}
	if want := []string{"a", "a", "a", "a"}; !slices.Equal(groups, want) {
		t.Fatalf("groups %v, want %v", groups, want)
	}
}

// TestBatchRefusesInconsistentInput: nothing partial is assembled.
func TestBatchRefusesInconsistentInput(t *testing.T) {
	a := group(t, "a", []uint8{1})
	cases := []struct {
		name string
		tb   messages.TrainBatch
		data [][]byte
		want string
	}{
		{"slot out of range", messages.TrainBatch{Groups: []messages.GroupRef{{GroupID: "a"}}, Slots: []messages.Slot{{Group: 1}}}, [][]byte{a}, "slot 0 takes group 1"},
		{"another group's batch", messages.TrainBatch{Groups: []messages.GroupRef{{GroupID: "z"}}}, [][]byte{a}, "group z: its batch holds trajectory a/0 of group a"},
		{"undecodable", messages.TrainBatch{Groups: []messages.GroupRef{{GroupID: "a"}}}, [][]byte{[]byte("nope")}, "group a"},
		{"missing batch", messages.TrainBatch{Groups: []messages.GroupRef{{GroupID: "a"}, {GroupID: "b"}}}, [][]byte{a}, "1 batches for 2 groups"},
		{"no groups", messages.TrainBatch{Step: 3}, nil, "step 3: no groups"},
	}
	for _, tc := range cases {
		if _, _, err := Batch(tc.tb, tc.data); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one saying %q", tc.name, err, tc.want)
		}
	}
}
