// Package bridgetrain is the Tinker server's exec training backend: each
// Tinker model is a trainer child process (tinker.trainer_exec, e.g. the
// PyTorch worker integrations/torch/asyncrl_worker) driven through the
// worker bridge (actors/trainer/bridge) with the ForwardBackward and
// OptimStep frames. It implements the same Trainer contract as
// tinker/gotrain: ForwardBackward returns per-datum logprobs and
// elementwise losses of Tinker's losses (cross_entropy,
// importance_sampling, ppo, cispo — the definitions of gotrain, summed)
// and, with backward, adds the gradient to the child's accumulator;
// OptimStep applies it with the call's AdamW parameters and clears it.
//
// SaveState writes the child's resume state (FP32 weights, optimiser
// state) plus bridgetrain.json (the optimiser step); LoadState starts a
// fresh child from such a directory (with the optimiser state, or weights
// only); SaveSampler writes the BF16 serving checkpoint the engines load.
//
// Options.Kind picks Init's model kind: builtin (the built-in policy,
// with its config.json in Init) or hf (a Hugging Face checkpoint of a
// native architecture, the torch worker's asyncrl_worker/hf).
//
// Failures: a child that exits, hangs past the timeout or breaks the
// protocol loses its accumulated gradient and the steps since the last
// load, so — unlike the RL trainer's TrainBatch — a call is never
// replayed: it fails with bridge.ErrChildLost, and so does every later
// call until LoadState restarts the child from a saved state. An
// Error frame from the child (bad input, a non-finite loss) fails the call
// and leaves the child serving.
//
// A Model is not safe for concurrent use (the server runs one model's
// requests in order on one goroutine). Importers: tinker/server.
package bridgetrain
