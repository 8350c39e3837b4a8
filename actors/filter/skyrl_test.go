package filter

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// The vectors below are SkyRL's (reference/skyrl.md, "Dynamic sampling"),
// checked against skyrl-train/skyrl_train/utils/trainer_utils.py
// (NovaSky-AI/SkyRL): handle_filter_sampling keeps a uid iff
// `np.std(vals) > 0 or n_samples_per_prompt == 1`; handle_replace_sampling
// calls a uid good on the same rule; zero_variance_filter drops a uid only
// with > 1 live trajectory and max − min ≤ tol.

func TestSkyRLFilterVectors(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		name    string
		rewards []float64
		uids    []string
		n       int
		want    []int
	}{
		{"n=1 keeps every uid", []float64{1, 1, 1}, []string{"x", "y", "z"}, 1, []int{0, 1, 2}},
		{"flat groups dropped", []float64{1, 1, 2, 2}, []string{"a", "a", "b", "b"}, 2, nil},
		// np.std([5]) == 0: with n_samples_per_prompt 2 the one-trajectory
		// group u3 is dropped by the filter (only zero_variance_filter keeps it).
		{"one-trajectory group with n>1 dropped", []float64{1, 2, 3, 3, 5}, []string{"u1", "u1", "u2", "u2", "u3"}, 2, []int{0, 1}},
		{"singletons with n=2 all dropped", []float64{1, 2, 3}, []string{"x", "y", "z"}, 2, nil},
		// np.std([1, nan]) is nan and nan > 0 is False.
		{"NaN score dropped", []float64{1, nan, 0, 1}, []string{"a", "a", "b", "b"}, 2, []int{2, 3}},
		{"NaN with n=1 kept (n==1 short-circuits)", []float64{nan}, []string{"a"}, 1, []int{0}},
		// Deliberate difference: np.std([0.1, 0.1, 0.1]) is ~1.4e-17 > 0,
		// so SkyRL keeps this group although it carries no signal; we test
		// "scores not all equal" and drop it (docs/semantics.md).
		{"three 0.1s dropped (numpy keeps them)", []float64{0.1, 0.1, 0.1}, []string{"a", "a", "a"}, 3, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := KeepIndices(batch(tc.rewards, tc.uids), tc.n); !slices.Equal(got, tc.want) {
				t.Fatalf("keep %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSkyRLZeroVarianceFilterVector(t *testing.T) {
	// zero_variance_filter([1,2,3,3,5], [u1,u1,u2,u2,u3]) == [0,1,4]: the
	// masked trajectories are the complement, [2,3].
	s := batch([]float64{1, 2, 3, 3, 5}, []string{"u1", "u1", "u2", "u2", "u3"})
	if got := ZeroVarianceMask(s, 1e-6); !slices.Equal(got, []int{2, 3}) {
		t.Fatalf("masked %v, want [2 3]", got)
	}
	// A NaN live score is masked (deliberate difference: SkyRL's
	// max − min ≤ tol is False for NaN, so it would train on a NaN reward).
	n := batch([]float64{math.NaN(), 1, 0, 1}, []string{"a", "a", "b", "b"})
	if got := ZeroVarianceMask(n, 1e-6); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("NaN group: masked %v, want [0 1]", got)
	}
}

func TestSkyRLReplaceVectors(t *testing.T) {
	// [1,1,2,2]/[u1,u1,u2,u2], ratio 0.3: no good uid → keep sampling,
	// batch unchanged.
	s := batch([]float64{1, 1, 2, 2}, []string{"u1", "u1", "u2", "u2"})
	if r := Replace(s, 2, 0.3, rand.New(rand.NewPCG(1, 1))); r.Replaced || !slices.Equal(r.Source, []int{0, 1, 2, 3}) {
		t.Fatalf("%+v", r)
	}
	// A one-trajectory group with n 2 is bad and replaced; so is a NaN group.
	s = batch([]float64{0, 1, 7, math.NaN(), 3, 4, 5}, []string{"g", "g", "one", "nan", "nan", "g2", "g2"})
	r := Replace(s, 2, 0.3, rand.New(rand.NewPCG(1, 1)))
	if !r.Replaced || r.GoodGroups != 2 || r.TotalGroups != 4 {
		t.Fatalf("%+v", r)
	}
	for _, slot := range []int{2, 3, 4} {
		if u := s[r.Source[slot]].UID; u != "g" && u != "g2" {
			t.Fatalf("bad slot %d takes %s: %v", slot, u, r.Source)
		}
	}
}

func TestReplaceSlots(t *testing.T) {
	for _, tc := range []struct {
		name  string
		good  []bool
		ratio float64
		ok    bool
	}{
		{"none good", []bool{false, false}, 0.3, false},
		{"exactly at ratio is not enough", []bool{true, false}, 0.5, false},
		{"one of two over 0.3", []bool{true, false}, 0.3, true},
		{"all good", []bool{true, true, true}, 0.3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, donor := ReplaceSlots(tc.good, tc.ratio, rand.New(rand.NewPCG(2, 2)))
			if ok != tc.ok {
				t.Fatalf("ok=%t, want %t", ok, tc.ok)
			}
			if !ok {
				return
			}
			for i, d := range donor {
				if tc.good[i] && d != i || !tc.good[d] {
					t.Fatalf("donor %v for %v", donor, tc.good)
				}
			}
		})
	}
	// Enough good slots: distinct donors (a permutation).
	good := []bool{true, false, true, false, true}
	for seed := range uint64(20) {
		_, donor := ReplaceSlots(good, 0.3, rand.New(rand.NewPCG(seed, 0)))
		if donor[1] == donor[3] {
			t.Fatalf("seed %d: bad slots share donor %d", seed, donor[1])
		}
	}
}
