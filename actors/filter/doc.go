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
//     1. A group that arrived with one trajectory while n > 1 has std 0 and
//     is bad; a NaN score makes the std NaN and the group bad.
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
//     ReplaceSlots is the same choice over group slots, for the async
//     loop's mini-batch assembly.
//   - zero_variance_mask (tol default 1e-6): only live trajectories
//     (sum(loss_mask) > 0) count; a group with > 1 live trajectory and
//     max − min ≤ tol (or a NaN live score) is masked: it stays in the
//     batch and ZeroVarianceMask returns the indices whose loss mask the
//     caller zeroes; one live trajectory → kept unmasked.
//
// # Async loop
//
// Config.Decide judges one finished group and returns Keep or Drop (and,
// in zero_variance_mask mode, Mask) with a Reason. A dropped group must
// release its capacity (staleness.Controller.Filter) and its prompt counts
// as consumed, so filtering can never deadlock the loop. In replace mode
// Decide drops bad groups too; the controller fills their slots with
// copies of good groups when it assembles the mini-batch (ReplaceSlots).
//
// # Differences from SkyRL
//
// "std > 0" is tested as "scores not all equal": identical in exact
// arithmetic, but numpy can report a std of ~1e-17 for identical floats
// (e.g. three 0.1s) and keep a group with no signal. A NaN score is bad in
// every mode (SkyRL's replace leaves a NaN group in the batch as neither
// good nor bad, and its zero_variance_filter keeps it). SkyRL raises on
// max_sample_batches; Add returns an error and resets its state instead.
// docs/semantics.md lists each difference with the input that shows it.
// GRPO advantages live in package model, not here.
package filter
