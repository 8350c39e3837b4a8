// Package syncloop is the synchronous reference RL loop: no actors, no
// HTTP, no staleness. Each step samples Groups prompts × Samples completions
// from the BF16 serving copy of the policy with model/sampler, scores them
// with the task's environment, computes GRPO advantages, takes one trainer
// step, and refreshes the serving copy.
//
// It exists to prove the built-in model and trainer learn (its test is the
// acceptance test "mean reward rises within a minute on two cores") and as
// the baseline the asynchronous system must match at staleness 0. It is a
// pure core: randomness comes from one seeded PCG, and the whole run is
// deterministic for a Config.
package syncloop
