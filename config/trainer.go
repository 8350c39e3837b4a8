package config

import (
	"fmt"
	"strings"
	"time"
)

// TrainerConfig configures the fully asynchronous trainer: the staleness
// bound, the loss, microbatching and the backend that runs the steps.
type TrainerConfig struct {
	// MaxStalenessSteps is S: a group generated at step i may be trained up
	// to step i+S (SkyRL default 4).
	MaxStalenessSteps int `yaml:"max_staleness_steps" doc:"S: a group generated at step i may be trained at most at step i+S (SkyRL: 4)"`
	// NumParallelGenerationWorkers is W, the groups generated at once.
	// Left out of a file, it is DefaultGenerationWorkers(B, S).
	NumParallelGenerationWorkers int `yaml:"num_parallel_generation_workers" doc:"W: groups in generation at once; need B ≤ W ≤ B·(S+1); left out: min(2·B, B·(S+1))"`
	// MiniBatchSize is B, the groups per trainer step.
	MiniBatchSize int `yaml:"mini_batch_size" doc:"B: groups (prompts) per trainer step"`
	// StalePolicy is what happens to a group over the bound at training time.
	StalePolicy StalePolicy `yaml:"stale_policy" doc:"group over the staleness bound at training time: requeue (enforce) or accept (count only, like SkyRL)"`
	// LearningRate is Adam's step size.
	LearningRate float64 `yaml:"learning_rate" doc:"Adam learning rate"`
	// GradClip is the global gradient-norm clip (0 = off).
	GradClip float64 `yaml:"grad_clip" doc:"global gradient-norm clip; 0 = off"`
	// LossReduction is how token losses become one number (SkyRL definitions).
	LossReduction LossReduction `yaml:"loss_reduction" doc:"how token losses are reduced (SkyRL loss_reduction)"`
	// MaxSeqLen is the constant seq_mean_token_sum_norm divides each
	// sequence's token sum by (SkyRL algorithm.max_seq_len). 0 = the longest
	// sequence an engine serves: engines.max_model_len, or the built-in
	// model's max_seq_len when that is 0 (SkyRL likewise derives it from the
	// generator's input and output limits).
	MaxSeqLen int `yaml:"max_seq_len" doc:"seq_mean_token_sum_norm divisor per sequence; 0 = engines.max_model_len, else the model's max_seq_len"`
	// PolicyLossType is the policy loss (SkyRL policy_loss_type). Every type
	// takes the PPO "old" logprobs from the trainer's own forward pass before
	// the update, so with one update per mini-batch the ratio starts at 1.
	PolicyLossType PolicyLossType `yaml:"policy_loss_type" doc:"policy loss (SkyRL policy_loss_type); old logprobs come from the trainer's own forward pass"`
	// ClipRatioC caps dual_clip's loss for negative advantages at
	// −A·clip_ratio_c (SkyRL default 3; must be > 1).
	ClipRatioC float64 `yaml:"clip_ratio_c" doc:"dual_clip: loss for A < 0 is at most -A·clip_ratio_c (> 1)"`
	// CISPOEpsClipLow and CISPOEpsClipHigh bound cispo's importance weight
	// to [1 − low, 1 + high] (SkyRL cispo.cispo_eps_clip_low/high: 0 and 5).
	CISPOEpsClipLow  float64 `yaml:"cispo_eps_clip_low" doc:"cispo: importance weight ≥ 1 - cispo_eps_clip_low, in [0, 1]"`
	CISPOEpsClipHigh float64 `yaml:"cispo_eps_clip_high" doc:"cispo: importance weight ≤ 1 + cispo_eps_clip_high"`
	// TISRatioType corrects for rollouts from older (or differently rounded)
	// weights with truncated importance sampling: each token's policy loss is
	// multiplied by min(exp(logp_old − logp_rollout), cap) — the only place
	// the rollout logprobs enter the policy loss (SkyRL
	// off_policy_correction.tis_ratio_type; its null is none).
	TISRatioType TISRatioType `yaml:"tis_ratio_type" doc:"truncated importance sampling by exp(logp_old - logp_rollout): none, per token or per sequence"`
	// TokenTISRatioClipHigh caps the token TIS ratio (SkyRL default 2).
	TokenTISRatioClipHigh float64 `yaml:"token_tis_ratio_clip_high" doc:"cap of the token TIS ratio (SkyRL: 2; 1.5–5 recommended)"`
	// SequenceTISRatioClipHigh caps the sequence TIS ratio (SkyRL default 5).
	SequenceTISRatioClipHigh float64 `yaml:"sequence_tis_ratio_clip_high" doc:"cap of the sequence TIS ratio (SkyRL: 5; 2–10 recommended)"`
	// EpsClipLow is the PPO ratio clip below 1: ratio ≥ 1 - eps_clip_low.
	EpsClipLow float64 `yaml:"eps_clip_low" doc:"PPO clip: ratio ≥ 1 - eps_clip_low"`
	// EpsClipHigh is the PPO ratio clip above 1 (DAPO's clip-higher uses 0.28).
	EpsClipHigh float64 `yaml:"eps_clip_high" doc:"PPO clip: ratio ≤ 1 + eps_clip_high (DAPO clip-higher: 0.28)"`
	// EntropyCoef weights the entropy bonus (0 = off).
	EntropyCoef float64 `yaml:"entropy_coef" doc:"entropy bonus weight; 0 = off"`
	// KLCoef weights the k3 KL term against the rollout policy (0 = off).
	KLCoef float64 `yaml:"kl_coef" doc:"k3 KL penalty weight against the rollout logprobs; 0 = off"`
	// NormalizeOverSupport renormalises each token's logprob over the
	// candidates the sampler kept (top-p/top-k replay): the trainer's own
	// logprob over the token's sample_support, the rollout's from the
	// engine's output_support_logprobs (built-in engines report it; an
	// engine that sends sample_support without it fails the turn with
	// rollout.ErrEngine rather than train on mismatched logprobs). With no
	// filter active (top_p 1, top_k off) the support is the whole
	// vocabulary and the setting changes nothing. Valid with any other
	// setting.
	NormalizeOverSupport bool `yaml:"normalize_over_support" doc:"normalise each token's logprob over the sampler's kept candidates (top-p/top-k replay)"`
	// MaxTokensPerMicrobatch caps a microbatch's tokens (-1 = one microbatch
	// per mini-batch).
	MaxTokensPerMicrobatch int `yaml:"max_tokens_per_microbatch" doc:"token cap per microbatch; -1 = off (whole mini-batch at once)"`
	// MicrobatchMode is the packing algorithm.
	MicrobatchMode MicrobatchMode `yaml:"microbatch_mode" doc:"microbatch packing: balanced (least-loaded bin) or ffd (first-fit decreasing)"`
	// DPPartition splits microbatches across data-parallel ranks.
	DPPartition DPPartition `yaml:"dp_partition" doc:"split across DP ranks: contiguous (SkyRL) or karmarkar_karp (balanced)"`
	// DPSize is the number of data-parallel trainer ranks.
	DPSize int `yaml:"dp_size" doc:"data-parallel trainer ranks"`
	// PauseMode is what engines do with in-flight requests during a weight update.
	PauseMode PauseMode `yaml:"pause_mode" doc:"in-flight requests during a weight update: keep, abort or wait"`
	// Backend runs the gradient steps.
	Backend TrainerBackend `yaml:"backend" doc:"where steps run: builtin (in-process tiny policy), remote (worker over the bus) or exec (a child process over the worker bridge)"`
	// Exec is the trainer child's command and arguments (backend exec):
	// it speaks the worker-bridge frames on its stdin/stdout
	// (docs/protocol.md), e.g. ["/usr/bin/python3", "-m", "asyncrl_worker"].
	Exec []string `yaml:"exec" doc:"backend exec: the trainer child's argv, e.g. [/usr/bin/python3, -m, asyncrl_worker]; it speaks the worker-bridge frames on stdin/stdout"`
	// ExecEnv is added to the child's environment (KEY=VALUE). Relative
	// paths in it are the child's business: it runs in asyncrl's working
	// directory.
	ExecEnv []string `yaml:"exec_env" doc:"backend exec: KEY=VALUE entries added to the child's environment (e.g. PYTHONPATH=integrations/torch; the child runs in asyncrl's working directory)"`
	// ExecStepTimeout is how long one step may take the child before it is
	// killed and restarted from the last completed step.
	ExecStepTimeout time.Duration `yaml:"exec_step_timeout" doc:"backend exec: a step not answered within this is failed; the child is killed and restarted from the last completed step"`
	// ExecRestarts is how many times in a row a dead or hung child is
	// replaced before the run fails (a completed step resets the count).
	ExecRestarts int `yaml:"exec_restarts" doc:"backend exec: consecutive child restarts before the run fails; a completed step resets the count"`
	// ExecRanks is the size of the trainer child's data-parallel group:
	// that many copies of trainer.exec joined as one torch.distributed
	// group whose rendezvous asyncrl owns (docs/protocol.md "Worker
	// groups"). Above 1 it is also the microbatcher's DP size.
	ExecRanks int `yaml:"exec_ranks" doc:"backend exec: data-parallel ranks of the trainer child (a torch.distributed group on 127.0.0.1, gloo on CPU); B·n must be a multiple of it; 1 = one child"`
	// ExecNodes spreads the group over that many `asyncrl node` processes
	// with the trainer role, exec_ranks on each: the term holder's node
	// hosts ranks 0…exec_ranks-1 and the rendezvous, and asks the other
	// trainer nodes (by name order) over the bus to start the rest
	// (docs/protocol.md "Multi-node groups"). World size exec_ranks ×
	// exec_nodes. asyncrl run (one process) refuses more than 1.
	ExecNodes int `yaml:"exec_nodes" doc:"backend exec on asyncrl node: trainer nodes one data-parallel group spans, exec_ranks on each (world size exec_ranks·exec_nodes); the term holder hosts rank 0 and asks other trainer-role nodes to start the rest; 1 = the holder's node only"`
	// ExecRendezvousTimeout bounds the group's rendezvous: a rank that
	// has not joined by then fails the start.
	ExecRendezvousTimeout time.Duration `yaml:"exec_rendezvous_timeout" doc:"backend exec with exec_ranks > 1: every rank must join the group's rendezvous within this, else the start fails naming the address"`
	// InitCheckpoint is a trainer checkpoint (model.SaveTrainer's
	// layout: trainer.safetensors + config.json) `asyncrl run` starts
	// from instead of run.seed's fresh weights — e.g. an SFT run's
	// <sft.output_dir>/latest/trainer. Weights, Adam moments and step come
	// from it, every hyperparameter from this config; the engines serve
	// its BF16 copy as version 0.
	InitCheckpoint string `yaml:"init_checkpoint" doc:"where the run starts: backend builtin, a built-in trainer checkpoint (e.g. an SFT run's <sft.output_dir>/latest/trainer); backend exec with a model section, a Hugging Face checkpoint directory (e.g. an SFT run's <sft.output_dir>/latest/serving) that the child trains and the engines serve as version 0; empty = fresh weights from run.seed (or model.path)"`
	// FakeQuant runs the built-in trainer's forward and backward passes on
	// the INT4 weights an engine with engines.quantize of the same name
	// serves, the gradient applied to the float32 masters unchanged
	// (straight-through estimator), so the trainer's logprobs are the
	// engine's. The exec backend sends it to its child (Init
	// loss.fake_quant, docs/protocol.md).
	FakeQuant FakeQuantization `yaml:"fake_quant" doc:"fake quantisation in the trainer's forward pass with a straight-through gradient: none, int4_g32 or int4_g128 (match engines.quantize)"`
}

// DefaultGenerationWorkers is W for a file that sets mini_batch_size or
// max_staleness_steps but not num_parallel_generation_workers: two steps'
// worth of groups (what DefaultTrainer has, so engines stay busy while the
// trainer steps), capped at B·(S+1), the most the staleness bound allows.
func DefaultGenerationWorkers(b, s int) int {
	return int(min(2*int64(b), int64(b)*(int64(s)+1)))
}

// DefaultTrainer is sized for `make run` on 2 cores: B=4 groups per step,
// W=8 groups in flight (two steps' worth, so engines stay busy while the
// trainer steps) and S=2, which keeps B ≤ W ≤ B·(S+1) = 12 with room for a
// slow group; SkyRL's S=4 allows staler data than a 20-step run needs.
// The learning rate suits the tiny built-in policy (LLMs use ~1e-6).
func DefaultTrainer() TrainerConfig {
	return TrainerConfig{
		MaxStalenessSteps:            2,
		NumParallelGenerationWorkers: 8,
		MiniBatchSize:                4,
		StalePolicy:                  StaleRequeue,
		LearningRate:                 3e-3, // issue 5: the rate model/syncloop learns with; 1e-3 barely moved the reward in 30 steps
		GradClip:                     1,
		LossReduction:                LossTokenMean,
		MaxSeqLen:                    0,
		PolicyLossType:               PolicyLossRegular,
		ClipRatioC:                   3,
		CISPOEpsClipLow:              0,
		CISPOEpsClipHigh:             5,
		TISRatioType:                 TISNone,
		TokenTISRatioClipHigh:        2,
		SequenceTISRatioClipHigh:     5,
		EpsClipLow:                   0.2,
		EpsClipHigh:                  0.2,
		EntropyCoef:                  0,
		KLCoef:                       0,
		NormalizeOverSupport:         false,
		MaxTokensPerMicrobatch:       -1,
		MicrobatchMode:               MicrobatchBalanced,
		DPPartition:                  DPKarmarkarKarp,
		DPSize:                       1,
		PauseMode:                    PauseKeep,
		Backend:                      BackendBuiltin,
		Exec:                         []string{},
		ExecEnv:                      []string{},
		ExecStepTimeout:              10 * time.Minute,
		FakeQuant:                    FakeQuantNone,
		ExecRestarts:                 3,
		ExecRanks:                    1,
		ExecNodes:                    1,
		ExecRendezvousTimeout:        2 * time.Minute,
		InitCheckpoint:               "",
	}
}

// Validate checks the trainer section, including SkyRL's staleness rule
// B ≤ W ≤ B·(S+1): fewer workers than a mini-batch could never fill a step,
// and more than B·(S+1) would generate groups that are stale on arrival.
func (c TrainerConfig) Validate() error {
	v := checker{section: "trainer"}
	v.checkEnums(c)
	v.atLeast("max_staleness_steps", int64(c.MaxStalenessSteps), 0)
	v.atLeast("num_parallel_generation_workers", int64(c.NumParallelGenerationWorkers), 1)
	v.atLeast("mini_batch_size", int64(c.MiniBatchSize), 1)
	b, w, s := c.MiniBatchSize, c.NumParallelGenerationWorkers, c.MaxStalenessSteps
	if b >= 1 && w >= 1 && s >= 0 && (w < b || int64(w) > int64(b)*(int64(s)+1)) {
		v.fail("num_parallel_generation_workers", "%d is outside [mini_batch_size, mini_batch_size·(max_staleness_steps+1)] = [%d, %d] (B=%d, S=%d): set it in that range, or leave it out for %d (two steps' worth, within the bound)",
			w, b, int64(b)*(int64(s)+1), b, s, DefaultGenerationWorkers(b, s))
	}
	v.positiveFloat("learning_rate", c.LearningRate)
	v.nonNegativeFloat("grad_clip", c.GradClip)
	v.inRange("eps_clip_low", c.EpsClipLow, 0, 1)
	v.nonNegativeFloat("eps_clip_high", c.EpsClipHigh)
	v.nonNegativeFloat("entropy_coef", c.EntropyCoef)
	v.nonNegativeFloat("kl_coef", c.KLCoef)
	v.atLeast("max_seq_len", int64(c.MaxSeqLen), 0)
	if !(c.ClipRatioC > 1) {
		v.fail("clip_ratio_c", "must be > 1, got %g", c.ClipRatioC)
	}
	v.inRange("cispo_eps_clip_low", c.CISPOEpsClipLow, 0, 1)
	v.nonNegativeFloat("cispo_eps_clip_high", c.CISPOEpsClipHigh)
	v.positiveFloat("token_tis_ratio_clip_high", c.TokenTISRatioClipHigh)
	v.positiveFloat("sequence_tis_ratio_clip_high", c.SequenceTISRatioClipHigh)
	v.unboundedOrAtLeast("max_tokens_per_microbatch", int64(c.MaxTokensPerMicrobatch), 1)
	v.atLeast("dp_size", int64(c.DPSize), 1)
	v.positiveDuration("exec_step_timeout", c.ExecStepTimeout)
	v.atLeast("exec_restarts", int64(c.ExecRestarts), 0)
	c.validateRanks(&v)
	for i, kv := range c.ExecEnv {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			v.fail(fmt.Sprintf("exec_env[%d]", i), "want KEY=VALUE, got %q", kv)
		}
	}
	if c.InitCheckpoint != "" && c.Backend == BackendRemote {
		v.fail("init_checkpoint", "is where asyncrl run's own trainer starts: not with backend remote (the worker starts from its own)")
	}
	if c.Backend == BackendExec {
		if len(c.Exec) == 0 || c.Exec[0] == "" {
			v.fail("exec", "required with backend exec: the trainer child's command, e.g. [/usr/bin/python3, -m, asyncrl_worker]")
		}
	}
	return v.err()
}
