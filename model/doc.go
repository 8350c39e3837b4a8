// Package model is asyncrl's built-in policy model: a small autoregressive
// character-level network in pure Go that trains and serves on a CPU, so the
// whole asynchronous RL loop runs, and visibly learns, without a GPU or a
// download.
//
// # Architecture
//
// A window MLP: the last Config.Window tokens (PAD before the start of the
// sequence) are embedded, the embeddings concatenated slot by slot (so each
// slot has its own weights — that is the position information), and fed
// through Config.Layers tanh layers of width Config.Hidden and a linear head
// to VocabSize logits. About 47k parameters with DefaultConfig. It cannot
// look further back than Window tokens; tasks are designed to fit.
//
// # Contract
//
//   - New(cfg, seed) is deterministic: the same seed gives bit-identical
//     weights on every platform Go supports.
//   - NextLogits is safe for concurrent use by many goroutines as long as
//     nobody mutates the model (the engine serves a frozen copy; the trainer
//     owns its own copy). It does not allocate in steady state.
//   - Training (Forward/Backward into a Grad, Adam, Trainer.Step and the
//     accumulation API Begin/Accumulate/Apply) is
//     deterministic for a seed: gradients are reduced in a fixed order
//     whatever the scheduling; parallel workers (TrainerConfig.Workers) own
//     fixed contiguous chunks of the batch and their partial sums are added
//     in worker order. The result depends on Workers, never on timing.
//   - The first layer is evaluated through a table derived from the weights
//     (one Hidden-vector per window slot and token); every weight change
//     inside this package rebuilds it, so a Model must only be mutated
//     through its methods.
//   - Logits are computed by the same code for serving and training, so the
//     train–inference mismatch comes only from the weights (BF16 serving copy
//     vs FP32 master, or a stale version), never from the kernels.
//
// Weights are saved as safetensors (package weights/safetensors): BF16 for
// serving (SaveServing / LoadServing, with config.json), FP32 master weights
// plus Adam moments, step and RNG state for resuming training bit-identically
// (Trainer.SaveTrainer / LoadTrainer).
//
// # Mixture of experts and route replay
//
// Config.Experts > 0 (with TopK) makes every hidden layer a mixture of tanh
// experts with a bias-free linear router, Mixtral style (moe.go): the TopK
// largest router logits choose the experts (ties to the lower id, so the
// choice is deterministic), their outputs are summed with the softmax of
// their logits. The experts chosen at each position are its routes,
// [Layers·TopK] ids; Model.Routes reports them as vLLM's routed_experts
// rows, which makes *Model an engine.RoutesModel. A dense model (Experts 0)
// is bit-for-bit the model it was before, and so are its checkpoints.
// Route replay (R3): Sequence.Routes hands the trainer the engine's routes,
// and the trainer predicts each token with those experts instead of
// re-choosing them; the gates still come from its own router over the
// replayed experts, so the router keeps a gradient. Without it, a weight
// change or BF16 rounding that flips a near-tie sends a token through other
// experts in the trainer than the ones that sampled it.
//
// # Training
//
// Trainer.Step takes a Batch of sequences (tokens, loss mask, the logprobs
// the engine reported, a per-sequence advantage from Advantages) and runs one
// PPO/GRPO update with SkyRL's semantics (skyrl_train ppo_utils.py): the
// ratio is exp(logp_train − logp_old) where the "old" logprobs are the
// trainer's own forward pass on its weights before the update (SkyRL's
// fwd_logprobs_values_reward; or Sequence.OldLogprobs when given), so with
// one update per mini-batch it starts at 1. The rollout (engine) logprobs
// enter only through the off-policy correction — truncated importance
// sampling by min(exp(logp_old − logp_rollout), cap), per token or per
// sequence — the k3 KL term and the statistics. Policy losses regular
// (clip to [1−EpsLow, 1+EpsHigh]), dual_clip, gspo and cispo; SkyRL's five
// loss reductions; optional renormalisation over the sample support set;
// entropy bonus; global-norm clipping and AdamW. StepStats reports the
// train–inference mismatch mean |logp_train − logp_rollout| and the mean
// importance ratio exp(logp_old − logp_rollout).
//
// Batch.Loss LossCrossEntropy makes a step supervised (SFT, package sft):
// the loss is the negative log-likelihood of every loss-masked token at
// temperature 1, reduced as configured; rollout logprobs, advantages and
// the RL terms are not read. Trainer.NLL evaluates it without a step.
//
// # Gradient accumulation over microbatches
//
// A mini-batch too large for one pass is trained as microbatches with ONE
// optimiser step: Totals(b) gives the whole mini-batch's reduction
// denominators (sequences, trained tokens, max length), Begin(totals) opens
// the step, Accumulate(microbatch) adds each microbatch's gradient, Apply
// clips the summed gradient and takes the AdamW step. Every token's loss is
// weighted by the mini-batch's denominators (token_mean divides by the
// mini-batch's trained tokens, not the microbatch's), so any split — in any
// order, with padding microbatches of loss-mask-0 tokens anywhere — gives
// the gradient of the mini-batch in one piece up to float64 summation
// order; Apply refuses unless exactly the announced tokens were
// accumulated. StepMicrobatches(b, indices) does all four; Step(b) is the
// one-microbatch case. Accumulate's memory is the microbatch plus buffers
// allocated once by NewTrainer (one float64 gradient per worker, one
// accumulator, the workspaces), so peak memory does not grow with the
// mini-batch. A step being accumulated is not part of a trainer
// checkpoint.
package model
