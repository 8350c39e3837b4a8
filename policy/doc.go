// Package policy is asyncrl's built-in policy model: a small autoregressive
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
//   - Training (ForwardBackward, Adam, Trainer.Step) is deterministic for a
//     seed: gradients are reduced in a fixed order whatever the scheduling;
//     parallel workers (Config.Workers of the trainer) own fixed contiguous
//     chunks and their partial sums are added in worker order.
//   - Logits are computed by the same code for serving and training, so the
//     train–inference mismatch comes only from the weights (BF16 serving copy
//     vs FP32 master, or a stale version), never from the kernels.
//
// Weights are saved as safetensors (package weights/safetensors): BF16 for
// serving, FP32 master weights plus Adam state for resuming training.
package policy
