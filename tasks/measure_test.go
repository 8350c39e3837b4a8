package tasks

import (
	"math/rand/v2"
	"testing"

	"pgregory.net/rapid"
)

// TestRandomPolicySignal: a uniformly random policy (printable characters,
// length uniform in 1..MaxTokensPerTurn) must earn reward on every built-in
// task, and almost every group of 8 must have reward variance, or a freshly
// initialised model gets no learning signal and the filter drops everything.
//
// Measured with this exact setup (1,250 groups × 8 = 10,000 episodes,
// PCG(1, 2)), see also doc.go:
//
//	task     mean    P(score>0)  groups with variance  max
//	arith    0.0596  0.748       0.9992                1.00
//	copy     0.0462  0.591       0.9992                0.55
//	gridwalk 0.0406  0.539       0.9936                0.82
//	guess    0.0463  0.612       0.9984                0.82
//	reverse  0.0464  0.591       0.9992                0.55
//	sort     0.0463  0.591       0.9992                0.55
//
// Thresholds sit well below the measurement so the test pins the property,
// not the digits.
func TestRandomPolicySignal(t *testing.T) {
	for _, name := range builtins {
		st, err := MeasureRandomPolicy(mustGet(t, name), 1250, 8, rand.New(rand.NewPCG(1, 2)))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%-8s mean %.4f  nonzero %.3f  varied groups %.4f  max %.2f", name, st.MeanReward, st.NonZero, st.GroupsWithVariance, st.MaxReward)
		if st.Episodes != 10000 || st.MeanReward < 0.03 || st.GroupsWithVariance < 0.95 || st.NonZero < 0.4 {
			t.Errorf("%s: %+v: want mean >= 0.03, varied groups >= 0.95, nonzero >= 0.4", name, st)
		}
		if st.MaxReward > 1 {
			t.Errorf("%s: max episode reward %v > 1", name, st.MaxReward)
		}
	}
}

// TestEpisodeScoreBounds: whatever the model says, every episode's score is
// in [0, 1], every observation is printable ASCII, and episodes end within
// MaxTurns.
func TestEpisodeScoreBounds(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		task, err := Get(rapid.SampledFrom(builtins).Draw(rt, "task"))
		if err != nil {
			rt.Fatal(err)
		}
		p := task.Sample(rand.New(rand.NewPCG(rapid.Uint64().Draw(rt, "seed"), 0)))
		policy := func(conv string) string {
			if !printable(conv) {
				rt.Fatalf("conversation %q is not printable ASCII", conv)
			}
			return string(rapid.SliceOfN(rapid.ByteRange(0x20, 0x7E), 0, task.MaxTokensPerTurn()).Draw(rt, "action"))
		}
		s, turns, err := Episode(task, task.NewEnv(), p, policy)
		if err != nil || s < 0 || s > 1+1e-9 || turns > task.MaxTurns() {
			rt.Fatalf("score %v turns %d err %v", s, turns, err)
		}
	})
}
