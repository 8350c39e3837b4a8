package messages

import (
	"math"
	"reflect"
	"testing"

	"pgregory.net/rapid"
)

// TestTokenBatchProperty: for any spec and trajectories, slicing a trajectory
// out of the decoded batch returns exactly what was appended (the naive
// reference is the list of appended trajectories itself).
func TestTokenBatchProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		spec := BatchSpec{Vocab: rapid.Int32Range(0, 70000).Draw(rt, "vocab"), TokenRewards: rapid.Bool().Draw(rt, "token_rewards")}
		if rapid.Bool().Draw(rt, "routes") {
			spec.RouteLayers = rapid.Int32Range(1, 4).Draw(rt, "layers")
			spec.RouteTopK = rapid.Int32Range(1, 3).Draw(rt, "top_k")
			spec.NumExperts = rapid.SampledFrom([]int32{1, 8, 255, 256, 1<<15 - 1, 1 << 15, 1 << 20}).Draw(rt, "experts")
		}
		if rapid.Bool().Draw(rt, "support") {
			spec.SupportK = rapid.Int32Range(1, 4).Draw(rt, "k")
		}
		tb, err := NewTokenBatch(spec)
		if err != nil {
			rt.Fatal(err)
		}
		vocab := spec.Vocab
		if vocab == 0 {
			vocab = 1 << 30
		}
		var want []Trajectory
		for i, nb := 0, rapid.IntRange(0, 6).Draw(rt, "B"); i < nb; i++ {
			n := rapid.IntRange(0, 12).Draw(rt, "len")
			tr := Trajectory{
				ID:             rapid.String().Draw(rt, "id"),
				GroupID:        rapid.StringMatching(`g-[0-9]`).Draw(rt, "group"),
				Reward:         rapid.Float32().Draw(rt, "reward"),
				PromptLen:      int32(rapid.IntRange(0, n).Draw(rt, "prompt_len")),
				TokenIDs:       rapid.SliceOfN(rapid.Int32Range(0, vocab-1), n, n).Draw(rt, "tokens"),
				Logprobs:       rapid.SliceOfN(rapid.Float32Range(-50, 0), n, n).Draw(rt, "logprobs"),
				LossMask:       rapid.SliceOfN(rapid.Uint8Range(0, 1), n, n).Draw(rt, "mask"),
				PolicyVersions: rapid.SliceOfN(rapid.Int32Range(0, 1000), n, n).Draw(rt, "versions"),
			}
			if spec.TokenRewards {
				tr.TokenRewards = rapid.SliceOfN(rapid.Float32Range(-1, 1), n, n).Draw(rt, "token_rewards")
			}
			if spec.NumExperts > 0 {
				m := n * int(spec.RouteLayers*spec.RouteTopK)
				tr.Routes = rapid.SliceOfN(rapid.Int32Range(0, spec.NumExperts-1), m, m).Draw(rt, "routes")
			}
			if spec.SupportK > 0 {
				m := n * int(spec.SupportK)
				tr.Support = rapid.SliceOfN(rapid.Int32Range(-1, vocab-1), m, m).Draw(rt, "support")
			}
			if err := tb.Append(tr); err != nil {
				rt.Fatalf("append: %v", err)
			}
			want = append(want, tr)
		}
		enc, err := EncodeTokenBatch(tb)
		if err != nil {
			rt.Fatal(err)
		}
		got, err := DecodeTokenBatch(enc)
		if err != nil {
			rt.Fatal(err)
		}
		if got.Len() != len(want) {
			rt.Fatalf("%d trajectories, want %d", got.Len(), len(want))
		}
		for i, w := range want {
			tr, err := got.Trajectory(i)
			if err != nil {
				rt.Fatal(err)
			}
			if !sameTrajectory(tr, w) {
				rt.Fatalf("trajectory %d:\n got %+v\nwant %+v", i, tr, w)
			}
		}
	})
}

// sameTrajectory compares treating nil and empty slices alike (for a
// zero-token trajectory the two are indistinguishable on the wire) and
// floats bitwise, so a NaN reward equals itself.
func sameTrajectory(a, b Trajectory) bool {
	norm := func(t Trajectory) Trajectory {
		if len(t.TokenIDs) == 0 {
			t.TokenIDs, t.Logprobs, t.LossMask, t.PolicyVersions = nil, nil, nil, nil
			t.TokenRewards, t.Routes, t.Support = nil, nil, nil
		}
		return t
	}
	a, b = norm(a), norm(b)
	if math.Float32bits(a.Reward) != math.Float32bits(b.Reward) {
		return false
	}
	a.Reward, b.Reward = 0, 0
	return reflect.DeepEqual(a, b)
}
