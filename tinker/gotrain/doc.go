// Package gotrain is the Tinker server's training backend on the built-in
// Go policy (package model): one Model per Tinker model, holding its own
// FP32 weights, accumulated gradient and AdamW state.
//
// Contract: ForwardBackward computes, per datum, the logprob of every
// target token (logits of the model input's prefix up to that position)
// and the loss Tinker names — cross_entropy −Σ w·logp, importance_sampling
// −Σ exp(logp − q)·A, ppo −Σ min(r·A, clip(r, lo, hi)·A), cispo
// −Σ sg(clip(r, lo, hi))·A·logp — summed, never averaged (Tinker's losses
// are sums; callers put the normalisation in weights/advantages). With
// backward it adds the gradient to the model's accumulator, which
// OptimStep applies with the call's Adam parameters and then clears, as
// Tinker's forward_backward/optim_step pair does. SaveState/LoadState
// round-trip the FP32 weights and the optimiser state byte for byte;
// SaveSampler writes the BF16 serving checkpoint the built-in engine loads.
//
// Tinker's models are LoRA adapters on a shared base. The built-in policy
// is tiny, so each model here trains a full copy of the base weights; the
// rank is recorded (get_info) but does not restrict the update.
//
// A Model is not safe for concurrent use; the server runs one model's
// requests in seq_id order on one goroutine.
package gotrain
