// Package sft runs supervised fine-tuning (`asyncrl sft`, docs/sft.md): it
// draws examples from a package sft/data Stream, groups them into steps of
// Config.TokensPerStep tokens, packs each step into microbatches
// (data.Pack: bins of at most Pack.Budget tokens, a multiple of Pack.DP of
// them, attention segments so no example sees another) and trains them
// with the cross-entropy objective (model.LossCrossEntropy) on the same
// trainer backends as RL: the built-in policy in process, or a child
// process over the worker bridge (the PyTorch worker, or `asyncrl worker
// child`) with TrainBatch loss "cross_entropy".
//
// # Contract
//
//   - One step is ONE optimiser step over all its microbatches (gradient
//     accumulation with the step's reduction denominators), exactly as an
//     RL mini-batch.
//   - A packed bin's examples are trained as separate sequences: the
//     built-in model has no attention, so a segment boundary is a sequence
//     boundary; the exec backend sends each example as its own sequence
//     and each bin as one microbatch of the plan.
//   - Checkpoints (Config.OutputDir/step-NNNNNNNN, and `latest` pointing at
//     the newest) hold the serving weights (serving/: config.json +
//     model.safetensors in BF16, what engines load), the trainer state
//     (trainer/: model.SaveTrainer for the built-in backend — the format
//     an RL run starts from with trainer.init_checkpoint — or the exec
//     child's own resume state) and state.json: the step, the sampler's
//     State() blob and the report so far. A checkpoint directory is written
//     under a temporary name and renamed, so it is complete or absent.
//   - Resume (Config.Resume) restores the newest checkpoint: weights,
//     optimiser, step, and the sampler through Stream.Restore, so the
//     steps after it see exactly the examples an uninterrupted run would
//     have seen; with the built-in backend and the same config the losses
//     are equal too (the trainer is deterministic for its worker count).
//   - Run's loop is a thin shell: what a step is made of is decided by the
//     pure function Assemble (examples in, sequences and microbatch plan
//     out); time comes from Options.Now.
package sft
