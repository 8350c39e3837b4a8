package filter

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func batch(rewards []float64, uids []string) []Sample {
	out := make([]Sample, len(rewards))
	for i := range rewards {
		out[i] = Scalar(uids[i], rewards[i])
	}
	return out
}

func TestKeepIndicesReferenceVectors(t *testing.T) {
	cases := []struct {
		name    string
		rewards []float64
		uids    []string
		n       int
		want    []int
	}{
		{"mixed", []float64{1, 2, 3, 3, 5}, []string{"u1", "u1", "u2", "u2", "u3"}, 2, []int{0, 1}},
		{"all flat", []float64{1, 1, 2, 2}, []string{"a", "a", "b", "b"}, 2, nil},
		{"n=1 keeps all", []float64{1, 1, 1}, []string{"x", "y", "z"}, 1, []int{0, 1, 2}},
		{"singletons dropped with n=2", []float64{1, 1, 1}, []string{"x", "y", "z"}, 2, nil},
		{"flat triple dropped", []float64{2, 2, 2, 0, 1}, []string{"a", "a", "a", "b", "b"}, 3, []int{3, 4}},
		{"n=1 keeps flat groups too", []float64{1, 1}, []string{"a", "a"}, 1, []int{0, 1}},
		{"interleaved uids", []float64{1, 0, 2, 0}, []string{"a", "b", "a", "b"}, 2, []int{0, 2}},
		{"empty batch", nil, nil, 2, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := KeepIndices(batch(tc.rewards, tc.uids), tc.n)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("keep %v, want %v", got, tc.want)
			}
		})
	}
}

func TestScoreIsSumOfTokenRewards(t *testing.T) {
	s := []Sample{
		{UID: "a", TokenRewards: []float64{0, 0, 1}},
		{UID: "a", TokenRewards: []float64{1, 0, 0}}, // same sum: flat
		{UID: "b", TokenRewards: []float64{0, 1}},
		{UID: "b", TokenRewards: []float64{0, 0}},
	}
	if got := KeepIndices(s, 2); !slices.Equal(got, []int{2, 3}) {
		t.Fatalf("keep %v", got)
	}
}

func mustAcc(t *testing.T, tbs, n, maxBatches int) *Accumulator {
	t.Helper()
	cfg := DefaultConfig()
	cfg.TrainBatchSize, cfg.NSamplesPerPrompt, cfg.MaxSampleBatches = tbs, n, maxBatches
	a, err := NewAccumulator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestAccumulatorReferenceVectors(t *testing.T) {
	t.Run("truncate to train_batch_size·n", func(t *testing.T) {
		a := mustAcc(t, 1, 2, 30)
		s := batch([]float64{1, 2, 3, 3}, []string{"u1", "u1", "u2", "u2"})
		r, err := a.Add(s)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Done || len(r.Refs) != 2 {
			t.Fatalf("result %+v", r)
		}
		for _, ref := range r.Refs {
			if s[ref.Index].UID != "u1" {
				t.Fatalf("ref %+v is %s, want u1", ref, s[ref.Index].UID)
			}
		}
	})
	t.Run("accumulate across batches", func(t *testing.T) {
		a := mustAcc(t, 2, 2, 30)
		b1 := batch([]float64{1, 2}, []string{"u1", "u1"})
		b2 := batch([]float64{3, 4}, []string{"u2", "u2"})
		r, err := a.Add(b1)
		if err != nil || r.Done || r.Prompts != 1 || r.SampleBatches != 1 {
			t.Fatalf("first: %+v %v", r, err)
		}
		r, err = a.Add(b2)
		if err != nil || !r.Done || len(r.Refs) != 4 {
			t.Fatalf("second: %+v %v", r, err)
		}
		want := []Ref{{0, 0}, {0, 1}, {1, 0}, {1, 1}}
		if !slices.Equal(r.Refs, want) {
			t.Fatalf("refs %v, want %v", r.Refs, want)
		}
		// Starts over after a completed batch.
		r, _ = a.Add(b1)
		if r.Done || r.Prompts != 1 || r.SampleBatches != 1 {
			t.Fatalf("after reset: %+v", r)
		}
	})
}

func TestAccumulatorMaxSampleBatches(t *testing.T) {
	flat := batch([]float64{1, 1}, []string{"u", "u"})
	a := mustAcc(t, 1, 2, 3)
	for i := 1; i <= 2; i++ {
		if r, err := a.Add(flat); err != nil || r.Done {
			t.Fatalf("batch %d: %+v %v", i, r, err)
		}
	}
	if _, err := a.Add(flat); !errors.Is(err, ErrMaxSampleBatches) {
		t.Fatalf("third batch: %v, want ErrMaxSampleBatches", err)
	}
	// Unbounded never errors.
	u := mustAcc(t, 1, 2, -1)
	for i := range 100 {
		if _, err := u.Add(flat); err != nil {
			t.Fatalf("unbounded batch %d: %v", i, err)
		}
	}
	// Reaching the limit with enough prompts is not an error.
	ok := mustAcc(t, 1, 2, 1)
	if r, err := ok.Add(batch([]float64{0, 1}, []string{"u", "u"})); err != nil || !r.Done {
		t.Fatalf("%+v %v", r, err)
	}
}

func TestAccumulatorNOne(t *testing.T) {
	a := mustAcc(t, 3, 1, 30)
	r, err := a.Add(batch([]float64{1, 1, 1, 1}, []string{"a", "b", "c", "d"}))
	if err != nil || !r.Done || len(r.Refs) != 3 || r.Prompts != 4 {
		t.Fatalf("%+v %v", r, err)
	}
}

func TestReplaceTooFewGoodKeepsSampling(t *testing.T) {
	s := batch([]float64{1, 1, 2, 2}, []string{"u1", "u1", "u2", "u2"})
	r := Replace(s, 2, 0.3, rand.New(rand.NewPCG(1, 2)))
	if r.Replaced || !slices.Equal(r.Source, []int{0, 1, 2, 3}) {
		t.Fatalf("%+v", r)
	}
	// Exactly at the ratio is not enough (strictly greater is required):
	// 1 good of 2 groups with ratio 0.5.
	s = batch([]float64{0, 1, 2, 2}, []string{"g", "g", "b", "b"})
	if r := Replace(s, 2, 0.5, rand.New(rand.NewPCG(1, 2))); r.Replaced {
		t.Fatalf("1 > 2×0.5 should be false: %+v", r)
	}
}

func checkReplaced(t *testing.T, s []Sample, n int, r ReplaceResult) {
	t.Helper()
	if !r.Replaced || len(r.Source) != len(s) {
		t.Fatalf("%+v", r)
	}
	for slot, src := range r.Source {
		if !good(s, groupsOf(s)[slices.IndexFunc(groupsOf(s), func(g group) bool { return g.uid == s[src].UID })].indices, n) {
			t.Fatalf("slot %d takes %d from a bad group", slot, src)
		}
		if good(s, indicesOf(s, s[slot].UID), n) && src != slot {
			t.Fatalf("good slot %d overwritten by %d", slot, src)
		}
	}
}

func indicesOf(s []Sample, uid string) []int {
	var out []int
	for i := range s {
		if s[i].UID == uid {
			out = append(out, i)
		}
	}
	return out
}

func TestReplaceEnoughGoodIsPermutation(t *testing.T) {
	// good: g1, g2, g3; bad: b1, b2. Distinct donors.
	s := batch([]float64{0, 1, 5, 5, 0, 2, 7, 7, 1, 3}, []string{"g1", "g1", "b1", "b1", "g2", "g2", "b2", "b2", "g3", "g3"})
	for seed := range uint64(20) {
		r := Replace(s, 2, 0.3, rand.New(rand.NewPCG(seed, 0)))
		checkReplaced(t, s, 2, r)
		d1, d2 := s[r.Source[2]].UID, s[r.Source[6]].UID
		if d1 == d2 {
			t.Fatalf("seed %d: both bad groups took donor %s, want distinct", seed, d1)
		}
		// Position by position: slot k of the bad group takes slot k of the donor.
		if r.Source[3] != r.Source[2]+1 || r.Source[7] != r.Source[6]+1 {
			t.Fatalf("seed %d: not position by position: %v", seed, r.Source)
		}
		again := Replace(s, 2, 0.3, rand.New(rand.NewPCG(seed, 0)))
		if !slices.Equal(r.Source, again.Source) {
			t.Fatalf("seed %d not deterministic: %v vs %v", seed, r.Source, again.Source)
		}
	}
}

func TestReplaceFewGoodWithReplacement(t *testing.T) {
	// 2 good of 5 groups (> 5×0.3 = 1.5), 3 bad: donors repeat.
	s := batch([]float64{0, 1, 1, 1, 2, 2, 0, 4, 3, 3}, []string{"g1", "g1", "b1", "b1", "b2", "b2", "g2", "g2", "b3", "b3"})
	seen := map[string]bool{}
	for seed := range uint64(20) {
		r := Replace(s, 2, 0.3, rand.New(rand.NewPCG(seed, 7)))
		checkReplaced(t, s, 2, r)
		for _, slot := range []int{2, 4, 8} {
			seen[s[r.Source[slot]].UID] = true
		}
	}
	if !seen["g1"] || !seen["g2"] {
		t.Fatalf("donors over 20 seeds: %v, want both good groups", seen)
	}
}

func TestReplaceUnevenGroupSizes(t *testing.T) {
	// Bad group of 3 filled from a good group of 2: wraps around.
	s := batch([]float64{0, 1, 4, 4, 4}, []string{"g", "g", "b", "b", "b"})
	r := Replace(s, 3, 0.3, rand.New(rand.NewPCG(3, 3)))
	if !r.Replaced || !slices.Equal(r.Source, []int{0, 1, 0, 1, 0}) {
		t.Fatalf("%+v", r)
	}
}

func TestZeroVarianceMask(t *testing.T) {
	live, dead := []float64{1, 1}, []float64{0, 0}
	cases := []struct {
		name string
		s    []Sample
		tol  float64
		want []int
	}{
		{"flat group masked", []Sample{
			{UID: "a", TokenRewards: []float64{1}, LossMask: live},
			{UID: "a", TokenRewards: []float64{1 + 1e-9}, LossMask: live},
			{UID: "b", TokenRewards: []float64{0}, LossMask: live},
			{UID: "b", TokenRewards: []float64{1}, LossMask: live},
		}, 1e-6, []int{0, 1}},
		{"dead trajectories do not count", []Sample{
			{UID: "a", TokenRewards: []float64{1}, LossMask: live},
			{UID: "a", TokenRewards: []float64{0}, LossMask: dead},
		}, 1e-6, nil},
		{"dead ones ignored in spread", []Sample{
			{UID: "a", TokenRewards: []float64{1}, LossMask: live},
			{UID: "a", TokenRewards: []float64{1}, LossMask: live},
			{UID: "a", TokenRewards: []float64{0}, LossMask: dead},
		}, 1e-6, []int{0, 1, 2}},
		{"above tol kept", []Sample{
			{UID: "a", TokenRewards: []float64{1}},
			{UID: "a", TokenRewards: []float64{1.1}},
		}, 1e-6, nil},
		{"no live kept", []Sample{
			{UID: "a", TokenRewards: []float64{1}, LossMask: dead},
			{UID: "a", TokenRewards: []float64{1}, LossMask: dead},
		}, 1e-6, nil},
		{"tol widens", []Sample{
			{UID: "a", TokenRewards: []float64{1}},
			{UID: "a", TokenRewards: []float64{1.1}},
		}, 0.2, []int{0, 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := ZeroVarianceMask(tc.s, tc.tol); !slices.Equal(got, tc.want) {
				t.Fatalf("masked %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	flat := batch([]float64{1, 1}, []string{"u", "u"})
	varied := batch([]float64{0, 1}, []string{"u", "u"})
	oneLive := []Sample{{UID: "u", TokenRewards: []float64{1}}, {UID: "u", TokenRewards: []float64{1}, LossMask: []float64{0}}}
	cases := []struct {
		mode   Mode
		n      int
		grp    []Sample
		keep   bool
		reason Reason
	}{
		{ModeNone, 2, flat, true, ReasonModeNone},
		{ModeFilter, 2, flat, false, ReasonZeroVariance},
		{ModeFilter, 2, varied, true, ReasonHasVariance},
		{ModeFilter, 1, flat, true, ReasonSingleSample},
		{ModeFilter, 2, flat[:1], false, ReasonSingleTrajectory},
		{ModeFilter, 2, batch([]float64{math.NaN(), 1}, []string{"u", "u"}), false, ReasonNaN},
		{ModeReplace, 2, flat, false, ReasonZeroVariance},
		{ModeZeroVarianceMask, 2, flat, true, ReasonZeroVariance}, // kept, masked
		{ModeZeroVarianceMask, 2, oneLive, true, ReasonFewLive},
		{ModeZeroVarianceMask, 2, varied, true, ReasonHasVariance},
	}
	for _, tc := range cases {
		cfg := DefaultConfig()
		cfg.Mode, cfg.NSamplesPerPrompt = tc.mode, tc.n
		d, err := cfg.Decide(tc.grp)
		if err != nil || d.Keep != tc.keep || d.Reason != tc.reason || d.UID != "u" {
			t.Errorf("%s n=%d: %v %v, want keep=%t %s", tc.mode, tc.n, d, err, tc.keep, tc.reason)
		}
		if wantMask := tc.mode == ModeZeroVarianceMask && tc.reason == ReasonZeroVariance; d.Mask != wantMask {
			t.Errorf("%s n=%d: mask=%t, want %t", tc.mode, tc.n, d.Mask, wantMask)
		}
	}
	if _, err := DefaultConfig().Decide(batch([]float64{1, 2}, []string{"a", "b"})); !errors.Is(err, ErrMixedGroup) {
		t.Fatalf("mixed uids: %v", err)
	}
	if _, err := DefaultConfig().Decide(nil); !errors.Is(err, ErrMixedGroup) {
		t.Fatalf("empty: %v", err)
	}
}

func TestValidate(t *testing.T) {
	mut := []func(*Config){
		func(c *Config) { c.Mode = "dapo" },
		func(c *Config) { c.TrainBatchSize = 0 },
		func(c *Config) { c.NSamplesPerPrompt = 0 },
		func(c *Config) { c.MaxSampleBatches = 0 },
		func(c *Config) { c.MaxSampleBatches = -2 },
		func(c *Config) { c.MinReplaceRatio = 1.5 },
		func(c *Config) { c.ZeroVarianceTol = -1 },
	}
	for i, m := range mut {
		c := DefaultConfig()
		m(&c)
		if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("mutation %d: %v", i, err)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}
