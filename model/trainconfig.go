package model

import (
	"fmt"
	"math"
)

// Loss reductions (SkyRL names and definitions: NovaSky-AI/SkyRL
// skyrl/backends/skyrl_train/utils/ppo_utils.py,
// apply_loss_reduction_to_advantages_minibatch, which scales each token's
// loss so that summing gives the reduction).
const (
	// TokenMean divides the summed token losses by the number of trained
	// tokens in the whole mini-batch.
	TokenMean = "token_mean"
	// SequenceMean averages each sequence's token losses over its own trained
	// tokens, then averages over sequences.
	SequenceMean = "sequence_mean"
	// SeqMeanTokenSumNorm divides the summed token losses by
	// batch size × max_seq_len (Dr. GRPO), max_seq_len a constant from the
	// config (TrainerConfig.ReductionMaxSeqLen), never the batch's longest.
	SeqMeanTokenSumNorm = "seq_mean_token_sum_norm"
	// PromptMean takes the token mean within each prompt's group of
	// sequences (Sequence.Group), then the mean over prompts.
	PromptMean = "prompt_mean"
	// TokenMeanLegacy takes the token mean within each microbatch, then the
	// mean over microbatches (SkyRL's pre-v0.3 behaviour: the result depends
	// on the microbatch split).
	TokenMeanLegacy = "token_mean_legacy"
)

// Policy loss types (SkyRL's policy_loss_type).
const (
	// LossRegular is PPO's clipped surrogate −min(r·A, clip(r, 1−εlow,
	// 1+εhigh)·A) with r = exp(logp − logp_old).
	LossRegular = "regular"
	// LossDualClip is LossRegular, but for A < 0 the loss is capped at
	// −A·clip_ratio_c (dual-clip PPO).
	LossDualClip = "dual_clip"
	// LossGSPO uses one sequence-level ratio exp(mean_t(logp − logp_old))
	// for every token of a sequence (GSPO-token), clipped like LossRegular.
	LossGSPO = "gspo"
	// LossCISPO is −A·sg(clip(r, 1−cispo_eps_clip_low,
	// 1+cispo_eps_clip_high))·logp: clipped importance weights, so clipped
	// tokens still get a gradient.
	LossCISPO = "cispo"
)

// Truncated importance sampling types (SkyRL's
// off_policy_correction.tis_ratio_type; SkyRL's null is TISNone).
const (
	// TISNone applies no off-policy correction.
	TISNone = "none"
	// TISToken multiplies each token's policy loss by
	// min(exp(logp_old − logp_rollout), token_tis_ratio_clip_high).
	TISToken = "token"
	// TISSequence multiplies every token of a sequence by
	// min(exp(Σ_t(logp_old − logp_rollout)), sequence_tis_ratio_clip_high).
	TISSequence = "sequence"
)

// TrainerConfig configures the built-in trainer.
type TrainerConfig struct {
	// LR is Adam's learning rate.
	LR float64 `json:"lr"`
	// WarmupSteps ramps the learning rate linearly over the first steps:
	// step k (1-based) uses LR·min(1, k/WarmupSteps) (LRAt); 0 = none.
	WarmupSteps int `json:"warmup_steps,omitempty"`
	// Beta1, Beta2 and Eps are Adam's moment decays and denominator epsilon.
	Beta1 float64 `json:"beta1"`
	Beta2 float64 `json:"beta2"`
	Eps   float64 `json:"eps"`
	// WeightDecay is decoupled (AdamW) weight decay; 0 disables it.
	WeightDecay float64 `json:"weight_decay"`
	// MaxGradNorm clips the global L2 gradient norm; 0 disables clipping.
	MaxGradNorm float64 `json:"max_grad_norm"`
	// EpsLow and EpsHigh bound the importance ratio to [1−EpsLow, 1+EpsHigh]
	// in the clipped PPO/GRPO objective (DAPO's clip-higher uses EpsHigh
	// 0.28).
	EpsLow  float64 `json:"eps_clip_low"`
	EpsHigh float64 `json:"eps_clip_high"`
	// Reduction is token_mean, sequence_mean, seq_mean_token_sum_norm,
	// prompt_mean or token_mean_legacy (SkyRL's loss_reduction).
	Reduction string `json:"loss_reduction"`
	// ReductionMaxSeqLen is the max_seq_len of seq_mean_token_sum_norm, a
	// constant so the loss has no length bias; 0 uses the model's
	// MaxSeqLen (SkyRL derives it from the generator's input and output
	// limits when unset). Never the batch's longest sequence.
	ReductionMaxSeqLen int `json:"reduction_max_seq_len"`
	// PolicyLoss is regular, dual_clip, gspo or cispo (SkyRL's
	// policy_loss_type).
	PolicyLoss string `json:"policy_loss_type"`
	// ClipRatioC caps dual_clip's loss for negative advantages at
	// −A·ClipRatioC (SkyRL clip_ratio_c, default 3). Must be > 1.
	ClipRatioC float64 `json:"clip_ratio_c"`
	// CISPOEpsLow and CISPOEpsHigh bound cispo's importance weight to
	// [1−CISPOEpsLow, 1+CISPOEpsHigh] (SkyRL defaults 0 and 5).
	CISPOEpsLow  float64 `json:"cispo_eps_clip_low"`
	CISPOEpsHigh float64 `json:"cispo_eps_clip_high"`
	// TISRatioType is none, token or sequence: truncated importance
	// sampling by exp(logp_old − logp_rollout), capped at TokenTISCap or
	// SequenceTISCap (SkyRL's off_policy_correction).
	TISRatioType string `json:"tis_ratio_type"`
	// TokenTISCap caps the token-level TIS ratio (SkyRL
	// token_tis_ratio_clip_high, default 2).
	TokenTISCap float64 `json:"token_tis_ratio_clip_high"`
	// SequenceTISCap caps the sequence-level TIS ratio (SkyRL
	// sequence_tis_ratio_clip_high, default 5).
	SequenceTISCap float64 `json:"sequence_tis_ratio_clip_high"`
	// SupportNorm renormalises each token's trainer logprob over its sample
	// support set (Sequence.Support) before the ratio, as SkyRL's
	// sample-support replay does. The rollout logprobs must then be
	// normalised over the same sets (the engine's output_support_logprobs),
	// or the ratio compares different distributions.
	SupportNorm bool `json:"support_norm"`
	// EntropyCoef subtracts EntropyCoef × entropy from the loss (an entropy
	// bonus); 0 disables it.
	EntropyCoef float64 `json:"entropy_coef"`
	// KLCoef adds KLCoef × k3(rollout ‖ trainer) per token, the k3 estimator
	// exp(x) − x − 1 with x = logp_rollout − logp_trainer; 0 disables it.
	KLCoef float64 `json:"kl_coef"`
	// Temperature is the sampling temperature the rollout logprobs were
	// computed at; the trainer divides its logits by it too. Must be > 0.
	Temperature float64 `json:"temperature"`
	// Workers is the number of goroutines computing gradients. The result
	// depends on Workers (float sums are reduced per worker, then in worker
	// order) but never on scheduling.
	Workers int `json:"workers"`
	// Seed seeds the trainer's RNG (saved in trainer checkpoints).
	Seed uint64 `json:"seed"`
	// FakeQuant is none (or empty), int4_g32 or int4_g128: the forward and
	// backward passes run on the weights an engine serving that
	// quantisation computes with (Model.Quantized), and the gradient goes
	// to the FP32 masters unchanged (straight-through estimator), so the
	// trainer's logprobs are the quantised engine's. While a step is open
	// Model() holds those weights; ServingCopy and SaveTrainer use the
	// masters.
	FakeQuant string `json:"fake_quant,omitempty"`
}

// DefaultTrainerConfig returns the settings the synchronous loop learns with.
func DefaultTrainerConfig() TrainerConfig {
	return TrainerConfig{
		LR: 3e-3, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8,
		MaxGradNorm: 1.0, EpsLow: 0.2, EpsHigh: 0.2,
		Reduction: TokenMean, Temperature: 1, Workers: 1,
		PolicyLoss: LossRegular, ClipRatioC: 3, CISPOEpsLow: 0, CISPOEpsHigh: 5,
		TISRatioType: TISNone, TokenTISCap: 2, SequenceTISCap: 5,
		// Without a small entropy bonus the tiny policy collapses to a
		// deterministic answer within ~100 steps and stops learning.
		EntropyCoef: 0.01,
	}
}

// Validate names the first invalid field.
func (c TrainerConfig) Validate() error {
	bad := func(field, want string, got any) error {
		return fmt.Errorf("%w: %s must be %s, got %v", ErrConfig, field, want, got)
	}
	switch {
	case !(c.LR > 0) || math.IsInf(c.LR, 0):
		return bad("lr", "> 0", c.LR)
	case c.WarmupSteps < 0:
		return bad("warmup_steps", ">= 0", c.WarmupSteps)
	case !(c.Beta1 >= 0 && c.Beta1 < 1):
		return bad("beta1", "in [0, 1)", c.Beta1)
	case !(c.Beta2 >= 0 && c.Beta2 < 1):
		return bad("beta2", "in [0, 1)", c.Beta2)
	case !(c.Eps > 0):
		return bad("eps", "> 0", c.Eps)
	case !(c.WeightDecay >= 0):
		return bad("weight_decay", ">= 0", c.WeightDecay)
	case !(c.MaxGradNorm >= 0):
		return bad("max_grad_norm", ">= 0 (0 = off)", c.MaxGradNorm)
	case !(c.EpsLow >= 0 && c.EpsLow < 1):
		return bad("eps_clip_low", "in [0, 1)", c.EpsLow)
	case !(c.EpsHigh >= 0):
		return bad("eps_clip_high", ">= 0", c.EpsHigh)
	case c.Reduction != TokenMean && c.Reduction != SequenceMean && c.Reduction != SeqMeanTokenSumNorm &&
		c.Reduction != PromptMean && c.Reduction != TokenMeanLegacy:
		return bad("loss_reduction", "one of token_mean, sequence_mean, seq_mean_token_sum_norm, prompt_mean, token_mean_legacy", c.Reduction)
	case c.ReductionMaxSeqLen < 0:
		return bad("reduction_max_seq_len", ">= 0 (0 = the model's max_seq_len)", c.ReductionMaxSeqLen)
	case c.PolicyLoss != LossRegular && c.PolicyLoss != LossDualClip && c.PolicyLoss != LossGSPO && c.PolicyLoss != LossCISPO:
		return bad("policy_loss_type", "one of regular, dual_clip, gspo, cispo", c.PolicyLoss)
	case !(c.ClipRatioC > 1) || math.IsInf(c.ClipRatioC, 0):
		return bad("clip_ratio_c", "> 1 and finite", c.ClipRatioC)
	case !(c.CISPOEpsLow >= 0 && c.CISPOEpsLow <= 1):
		return bad("cispo_eps_clip_low", "in [0, 1]", c.CISPOEpsLow)
	case !(c.CISPOEpsHigh >= 0) || math.IsInf(c.CISPOEpsHigh, 0):
		return bad("cispo_eps_clip_high", ">= 0 and finite", c.CISPOEpsHigh)
	case c.TISRatioType != TISNone && c.TISRatioType != TISToken && c.TISRatioType != TISSequence:
		return bad("tis_ratio_type", "one of none, token, sequence", c.TISRatioType)
	case !(c.TokenTISCap > 0) || math.IsInf(c.TokenTISCap, 0):
		return bad("token_tis_ratio_clip_high", "> 0 and finite", c.TokenTISCap)
	case !(c.SequenceTISCap > 0) || math.IsInf(c.SequenceTISCap, 0):
		return bad("sequence_tis_ratio_clip_high", "> 0 and finite", c.SequenceTISCap)
	case !(c.EntropyCoef >= 0):
		return bad("entropy_coef", ">= 0", c.EntropyCoef)
	case !(c.KLCoef >= 0):
		return bad("kl_coef", ">= 0", c.KLCoef)
	case !(c.Temperature > 0) || math.IsInf(c.Temperature, 0):
		return bad("temperature", "> 0 and finite", c.Temperature)
	case c.Workers < 1 || c.Workers > 256:
		return bad("workers", "in [1, 256]", c.Workers)
	case !fakeQuantable(c.FakeQuant):
		return bad("fake_quant", "one of "+quantNames(FakeQuants()), c.FakeQuant)
	}
	return nil
}

// LRAt is the learning rate of optimiser step k (1-based): LR after the
// warm-up, LR·k/WarmupSteps during it.
func (c TrainerConfig) LRAt(k int64) float64 {
	if c.WarmupSteps > 0 && k < int64(c.WarmupSteps) {
		return c.LR * float64(max(k, 1)) / float64(c.WarmupSteps)
	}
	return c.LR
}
