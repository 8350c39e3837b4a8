package trainer

import (
	"slices"
	"testing"

	"github.com/asyncrl/asyncrl/actors/trainer/microbatch"
	"github.com/asyncrl/asyncrl/messages"
)

// TestReplayReachesTheFrames: a token batch's routes column (R3) and
// support sets become the sequences' Routes/Support in Prepare and the
// TrainBatch's routes [T, L, K] and support [T, K] arrays in FrameBatch.
func TestReplayReachesTheFrames(t *testing.T) {
	tb, err := messages.NewTokenBatch(messages.BatchSpec{Vocab: 98, RouteLayers: 2, RouteTopK: 2, NumExperts: 300, SupportK: 2})
	if err != nil {
		t.Fatal(err)
	}
	a, b := traj("a", "g", 1, 4, 5), traj("b", "g", 0, 5)
	a.Routes = []int32{0, 1, 2, 3, 299, 298, 4, 5, 6, 7, 8, 9}
	b.Routes = []int32{10, 11, 12, 13, 14, 15, 16, 17}
	a.Support = []int32{-1, -1, 4, 9, 5, -1}
	b.Support = []int32{-1, -1, 4, 3}
	for _, tr := range []messages.Trajectory{a, b} {
		if err := tb.Append(tr); err != nil {
			t.Fatal(err)
		}
	}
	p, err := Prepare(tb, true, microbatch.DefaultConfig(), 5)
	if err != nil {
		t.Fatal(err)
	}
	if p.RouteLayers != 2 || p.RouteTopK != 2 || !slices.Equal(p.Batch.Sequences[0].Routes, a.Routes) {
		t.Fatalf("prepared routes %v (shape %d×%d)", p.Batch.Sequences[0].Routes, p.RouteLayers, p.RouteTopK)
	}
	f := FrameBatch(p, 6)
	r, s := f.Arrays["routes"], f.Arrays["support"]
	if !slices.Equal(r.Shape, []int64{5, 2, 2}) || !slices.Equal(r.Int32s(), append(slices.Clone(a.Routes), b.Routes...)) {
		t.Fatalf("routes array %v %v", r.Shape, r.Int32s())
	}
	if !slices.Equal(s.Shape, []int64{5, 2}) || !slices.Equal(s.Int32s(), []int32{-1, -1, 4, 9, 5, -1, -1, -1, 4, 3}) {
		t.Fatalf("support array %v %v", s.Shape, s.Int32s())
	}
	// Without replay columns the frame has neither array.
	plain, _ := messages.NewTokenBatch(messages.BatchSpec{Vocab: 98})
	_ = plain.Append(traj("c", "g", 1, 4))
	p, _ = Prepare(plain, true, microbatch.DefaultConfig(), 5)
	if f := FrameBatch(p, 6); f.Arrays["routes"].Data != nil || f.Arrays["support"].Data != nil {
		t.Fatal("replay arrays without replay columns")
	}
}
