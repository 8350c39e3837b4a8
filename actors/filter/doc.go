// Package filter is asyncrl's dynamic-sampling core: it decides which
// groups of trajectories carry a learning signal, with SkyRL's exact
// semantics.
//
// # Contract
//
// Pure functions and one small struct (Accumulator): no goroutines, locks,
// I/O, clock or global randomness; Replace takes the caller's *rand.Rand.
// The filter never touches trajectory data: a batch is a []Sample (uid,
// token rewards, loss mask) and every answer is an index or a Ref into the
// caller's batches, so tokens, logprobs and MoE routes move together.
// Expected outcomes (need more batches, discard and resample) are results;
// invalid input is an error wrapping ErrInvalidConfig or ErrMixedGroup;
// exhausting max_sample_batches wraps ErrMaxSampleBatches.
//
// # Modes
//
//   - none: keep everything.
//   - filter (DAPO): score = sum of token rewards. A group (uid) is kept iff
//     the population std of its scores is > 0, or n_samples_per_prompt ==
//     1 (a one-trajectory group counts as such, as SkyRL's vectors show).
//     KeepIndices filters one batch; Accumulator.Add gathers kept groups
//     across generation batches until ≥ train_batch_size groups, then
//     returns the first train_batch_size·n trajectories (Refs) and starts
//     over. Once sample_batch_count ≥ max_sample_batches (default 30, −1 =
//     unbounded) while more are needed, Add returns ErrMaxSampleBatches.
//   - replace (POLARIS): if good groups > total × min_replace_ratio
//     (default 0.3), Replace overwrites each bad group position by position
//     with the trajectories of a random good group (distinct donors from a
//     permutation when good ≥ bad, with replacement otherwise); batch size
//     unchanged; ReplaceResult.Source[i] says which input trajectory slot i
//     takes. Otherwise Replaced is false and the batch is discarded.
//   - zero_variance_mask (tol default 1e-6): only live trajectories
//     (sum(loss_mask) > 0) count; a group with > 1 live trajectory and
//     max − min ≤ tol is dropped (ZeroVarianceMask returns the indices whose
//     loss the caller zeroes); one live trajectory → kept.
//
// # Async loop
//
// Config.Decide judges one finished group and returns Keep or Drop with a
// Reason. A dropped group must release its capacity
// (staleness.Controller.Filter) and its prompt counts as consumed, so
// filtering can never deadlock the loop. In replace mode Decide drops bad
// groups: replacement needs a whole batch.
//
// # Differences from SkyRL
//
// "std > 0" is tested as "scores not all equal": identical in exact
// arithmetic, but numpy can report a std of ~1e-17 for identical floats
// (e.g. three 0.1s) and keep a group with no signal. SkyRL raises on
// max_sample_batches; Add returns an error and resets its state instead.
// GRPO advantages live in package policy, not here.
package filter
