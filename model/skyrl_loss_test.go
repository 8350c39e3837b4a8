package model

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/model/sampler"
)

// The expected values in this file are worked out by hand from SkyRL's
// formulas (NovaSky-AI/SkyRL skyrl/backends/skyrl_train/utils/ppo_utils.py:
// ppo_policy_loss, gspo_policy_loss, compute_policy_loss_cispo,
// apply_loss_reduction_to_advantages_minibatch; skyrl/backends/skyrl_train/
// utils/off_policy_correction_utils.py: compute_tis_ratio), not taken from
// this package's output.

func TestPolicyTokenSkyRLFormulas(t *testing.T) {
	e := math.Exp
	cfg := func(loss string) TrainerConfig {
		c := DefaultTrainerConfig()
		c.PolicyLoss = loss
		return c
	}
	cases := []struct {
		name             string
		cfg              TrainerConfig
		lp, old, adv, iw float64
		loss, dlp        float64
		clipped          bool
	}{
		// ratio 1 (old = own forward pass): loss −A, d/dlp −A·r.
		{"regular ratio 1", cfg(LossRegular), -1, -1, 2, 0, -2, -2, false},
		// r = e^0.5 ≈ 1.6487, A = 1: min(1.6487, 1.2) = 1.2 → clipped, no gradient.
		{"regular clipped high", cfg(LossRegular), -1, -1.5, 1, 0, -1.2, 0, true},
		// A = −1: min(−1.6487, −1.2) = −1.6487 → loss 1.6487, d/dlp = −A·r.
		{"regular negative A unclipped", cfg(LossRegular), -1, -1.5, -1, 0, e(0.5), e(0.5), false},
		// r = e^−0.5 ≈ 0.6065, A = −1: min(−0.6065, −0.8) = −0.8 → clipped.
		{"regular clipped low", cfg(LossRegular), -1.5, -1, -1, 0, 0.8, 0, true},
		// safe_exp_delta clamps the log-ratio at 20: r = e^20, no gradient.
		{"regular safe exp", cfg(LossRegular), 0, -25, -1, 0, e(20), 0, false},
		// dual clip, A = −1, r = e^2: regular loss e^2 ≈ 7.389 > −A·c = 3 → 3.
		{"dual_clip caps negative A", cfg(LossDualClip), -1, -3, -1, 0, 3, 0, false},
		// r = e^0.5: regular loss 1.6487 < 3 → unchanged.
		{"dual_clip below cap", cfg(LossDualClip), -1, -1.5, -1, 0, e(0.5), e(0.5), false},
		// positive A is untouched by the dual clip.
		{"dual_clip positive A", cfg(LossDualClip), -1, -3, 1, 0, -1.2, 0, true},
		// cispo: w = clamp(r, 1−0, 1+5); r = e^2 ≈ 7.39 → 6; loss −A·w·lp = 6.
		{"cispo capped", cfg(LossCISPO), -1, -3, 1, 0, 6, -6, true},
		// r = e^0.2 inside [1, 6]: loss −2·e^0.2·(−0.5), d/dlp −2·e^0.2.
		{"cispo inside", cfg(LossCISPO), -0.5, -0.7, 2, 0, e(0.2), -2 * e(0.2), false},
		// r = e^−0.5 < 1 − 0 → w = 1, counted as clipped; loss −1·1·(−1).
		{"cispo below", cfg(LossCISPO), -1, -0.5, 1, 0, 1, -1, true},
		// gspo: sequence ratio e^0.1 inside the band: loss −e^0.1, d/dlp −e^0.1.
		{"gspo inside", cfg(LossGSPO), -1, -1, 1, 0.1, -e(0.1), -e(0.1), false},
		// e^0.3 ≈ 1.35 > 1.2 with A = 1 → clipped at −1.2.
		{"gspo clipped", cfg(LossGSPO), -1, -1, 1, 0.3, -1.2, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			loss, dlp, clipped := tc.cfg.policyToken(tc.lp, tc.old, tc.adv, tc.iw)
			if math.Abs(loss-tc.loss) > 1e-9*max(1, math.Abs(tc.loss)) || math.Abs(dlp-tc.dlp) > 1e-9*max(1, math.Abs(tc.dlp)) || clipped != tc.clipped {
				t.Fatalf("loss %.9g dlp %.9g clipped %v, want %.9g %.9g %v", loss, dlp, clipped, tc.loss, tc.dlp, tc.clipped)
			}
		})
	}
}

func TestTISRatioSkyRLFormula(t *testing.T) {
	c := DefaultTrainerConfig() // token_tis_ratio_clip_high 2, as SkyRL
	for _, tc := range []struct{ old, rollout, want float64 }{
		{-1, -2, 2},                // e^1 ≈ 2.718 capped at 2
		{-1, -0.5, math.Exp(-0.5)}, // below the cap: exp(old − rollout)
		{-1, -1, 1},
		{0, -30, 2}, // safe_exp_delta's ±20 clamp, then the cap
	} {
		if got := c.tisToken(tc.old, tc.rollout); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("tis(old %v, rollout %v) = %v, want %v", tc.old, tc.rollout, got, tc.want)
		}
	}
}

// offByOneNat returns sequences whose rollout logprobs are shift nats off
// the model's own (the engine served older or rounded weights).
func offByOneNat(t *testing.T, m *Model, shift float32) []Sequence {
	t.Helper()
	l := make([]float32, m.VocabSize())
	s1 := []int32{1, 3, 4, 5}
	s2 := []int32{1, 6, 3, 4}
	var out []Sequence
	for _, toks := range [][]int32{s1, s2} {
		sq := Sequence{Tokens: toks, LossMask: []uint8{0, 0, 1, 1}, RolloutLogprobs: make([]float32, len(toks)), Advantage: 1}
		for i := 2; i < len(toks); i++ {
			m.NextLogits(toks[:i], l)
			sq.RolloutLogprobs[i] = sampler.LogProb(l, 1, toks[i]) - shift
		}
		out = append(out, sq)
	}
	return out
}

// SkyRL takes the PPO "old" logprobs from the trainer's own forward pass
// before the update (trainer.fwd_logprobs_values_reward), so the ratio of
// the one update per mini-batch starts at 1 however far the rollout
// logprobs are: nothing is clipped and every token has a gradient. The
// rollout logprobs only show in the mismatch and IS-ratio statistics.
func TestRatioStartsAtOneWithRolloutOffPolicy(t *testing.T) {
	m, _ := New(tinyConfig(), 2)
	seqs := offByOneNat(t, m, 1) // rollout one nat below: exp(lp − rollout) = e
	cfg := DefaultTrainerConfig()
	cfg.EntropyCoef = 0
	tr, _ := NewTrainer(m.Clone(), cfg)
	st, err := tr.Step(Batch{Sequences: seqs})
	if err != nil {
		t.Fatal(err)
	}
	if st.ClipFrac != 0 || st.GradNorm == 0 {
		t.Fatalf("clip fraction %v grad norm %v: the ratio must start at 1 (nothing clipped, a gradient)", st.ClipFrac, st.GradNorm)
	}
	// token_mean of −A·r with r = 1, A = 1.
	if math.Abs(st.Loss-(-1)) > 1e-9 {
		t.Fatalf("loss %v, want −1", st.Loss)
	}
	if math.Abs(st.ISRatio-math.E) > 1e-5 || math.Abs(st.Mismatch-1) > 1e-5 {
		t.Fatalf("is ratio %v mismatch %v, want e and 1", st.ISRatio, st.Mismatch)
	}
}

// Token TIS multiplies each token's loss by min(exp(old − rollout), cap):
// one nat gives e, capped at 2 → loss −2·A; half a nat the other way gives
// e^−0.5. Sequence TIS uses exp(Σ_t(old − rollout)) = e² over the two
// tokens, capped at sequence_tis_ratio_clip_high 5.
func TestTISScalesTheLoss(t *testing.T) {
	m, _ := New(tinyConfig(), 2)
	for _, tc := range []struct {
		typ   string
		shift float32
		want  float64
	}{
		{TISToken, 1, -2},
		{TISToken, -0.5, -math.Exp(-0.5)},
		{TISSequence, 1, -5},
		{TISSequence, 0.25, -math.Exp(0.5)},
		{TISNone, 1, -1},
	} {
		cfg := DefaultTrainerConfig()
		cfg.EntropyCoef, cfg.TISRatioType = 0, tc.typ
		tr, _ := NewTrainer(m.Clone(), cfg)
		st, err := tr.Step(Batch{Sequences: offByOneNat(t, m, tc.shift)})
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(st.Loss-tc.want) > 1e-5 {
			t.Errorf("tis %s, rollout %v nats below: loss %.7f, want %.7f", tc.typ, tc.shift, st.Loss, tc.want)
		}
	}
}

// Every reduction on one mini-batch whose token losses are −A (ratio 1):
// s0 two tokens A=1 (prompt a), s1 one token A=0.5 (prompt a), s2 four
// tokens A=−1 (prompt b); microbatches [[0], [1, 2]].
func TestReductionsSkyRL(t *testing.T) {
	m, _ := New(tinyConfig(), 1)
	batch := Batch{Sequences: []Sequence{
		{Tokens: []int32{1, 3, 4, 5}, LossMask: []uint8{0, 0, 1, 1}, Advantage: 1, Group: "a"},
		{Tokens: []int32{1, 6, 3}, LossMask: []uint8{0, 0, 1}, Advantage: 0.5, Group: "a"},
		{Tokens: []int32{1, 4, 4, 5, 6, 3}, LossMask: []uint8{0, 0, 1, 1, 1, 1}, Advantage: -1, Group: "b"},
	}}
	for i := range batch.Sequences {
		batch.Sequences[i].RolloutLogprobs = make([]float32, len(batch.Sequences[i].Tokens))
	}
	micro := [][]int{{0}, {1, 2}}
	cases := []struct {
		red    string
		maxLen int
		want   float64
	}{
		// Σ −A over 7 tokens = −(1+1+0.5−4) = 1.5; ÷ 7.
		{TokenMean, 0, 1.5 / 7},
		// per-sequence means −1, −0.5, +1; ÷ 3 sequences.
		{SequenceMean, 0, -0.5 / 3},
		// per-sequence sums −2, −0.5, 4; ÷ (3 × max_seq_len): the model's 16…
		{SeqMeanTokenSumNorm, 0, 1.5 / (3 * 16)},
		// …or the configured 10.
		{SeqMeanTokenSumNorm, 10, 1.5 / (3 * 10)},
		// prompt a: −2.5 over 3 tokens; prompt b: 4 over 4; mean of the two.
		{PromptMean, 0, (-2.5/3 + 1) / 2},
		// microbatch 0: −2 over 2; microbatch 1: 3.5 over 5; mean of the two.
		{TokenMeanLegacy, 0, (-1 + 0.7) / 2},
	}
	for _, c := range cases {
		cfg := DefaultTrainerConfig()
		cfg.Reduction, cfg.ReductionMaxSeqLen, cfg.EntropyCoef = c.red, c.maxLen, 0
		tr, err := NewTrainer(m.Clone(), cfg)
		if err != nil {
			t.Fatalf("%s: %v", c.red, err)
		}
		st, err := tr.StepMicrobatches(batch, micro)
		if err != nil {
			t.Fatalf("%s: %v", c.red, err)
		}
		if math.Abs(st.Loss-c.want) > 1e-9 {
			t.Errorf("%s (max_seq_len %d): loss %.9f, want %.9f", c.red, c.maxLen, st.Loss, c.want)
		}
	}
}

func TestPromptMeanNeedsGroups(t *testing.T) {
	m, _ := New(tinyConfig(), 1)
	cfg := DefaultTrainerConfig()
	cfg.Reduction = PromptMean
	tr, _ := NewTrainer(m, cfg)
	_, err := tr.Step(Batch{Sequences: []Sequence{{Tokens: []int32{1, 3}, LossMask: []uint8{0, 1}, RolloutLogprobs: []float32{0, -1}}}})
	if err == nil {
		t.Fatal("prompt_mean accepted a sequence without a Group")
	}
}

// Logprobs is the own forward pass; passing its result as OldLogprobs
// gives the same step as leaving them to the trainer (up to the float32
// rounding of the stored logprobs).
func TestLogprobsAreTheOldLogprobs(t *testing.T) {
	m, _ := New(tinyConfig(), 4)
	seqs := offByOneNat(t, m, 0.3)
	cfg := DefaultTrainerConfig()
	a, _ := NewTrainer(m.Clone(), cfg)
	b, _ := NewTrainer(m.Clone(), cfg)
	old, err := b.Logprobs(Batch{Sequences: seqs})
	if err != nil {
		t.Fatal(err)
	}
	withOld := slices.Clone(seqs)
	for i := range withOld {
		withOld[i].OldLogprobs = old[i]
		if d := math.Abs(float64(old[i][3] - (seqs[i].RolloutLogprobs[3] + 0.3))); d > 1e-5 {
			t.Fatalf("Logprobs %v, want the model's own logprob", old[i])
		}
	}
	if _, err := a.Step(Batch{Sequences: seqs}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Step(Batch{Sequences: withOld}); err != nil {
		t.Fatal(err)
	}
	for i := range a.model.params {
		if d := math.Abs(float64(a.model.params[i] - b.model.params[i])); d > 1e-5 {
			t.Fatalf("param %d differs by %g", i, d)
		}
	}
}

func TestTrainerConfigValidateNamesNewFields(t *testing.T) {
	for _, tc := range []struct {
		field string
		mod   func(*TrainerConfig)
	}{
		{"policy_loss_type", func(c *TrainerConfig) { c.PolicyLoss = "ppo" }},
		{"clip_ratio_c", func(c *TrainerConfig) { c.ClipRatioC = 1 }},
		{"tis_ratio_type", func(c *TrainerConfig) { c.TISRatioType = "tokens" }},
		{"token_tis_ratio_clip_high", func(c *TrainerConfig) { c.TokenTISCap = 0 }},
		{"sequence_tis_ratio_clip_high", func(c *TrainerConfig) { c.SequenceTISCap = -1 }},
		{"cispo_eps_clip_low", func(c *TrainerConfig) { c.CISPOEpsLow = 2 }},
		{"loss_reduction", func(c *TrainerConfig) { c.Reduction = "prompt" }},
	} {
		c := DefaultTrainerConfig()
		tc.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v", tc.field, err)
		}
	}
}
