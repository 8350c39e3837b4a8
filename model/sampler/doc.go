// Package sampler turns one logits vector into one sampled token.
//
// It is a pure function over its inputs: no goroutines, no global
// randomness (the caller passes a *rand.Rand from math/rand/v2), no I/O.
// Given the same logits, Params and RNG state it returns the same token,
// log-probability and support set, which is what lets the built-in engine
// replay a rollout exactly.
//
// # Semantics (matching vLLM's V1 sampler where they overlap)
//
//   - Temperature T scales logits: z = logits / T. T = 0 means greedy
//     (argmax, ties to the lowest id) and the logprob is then reported at T = 1.
//   - Filters are applied in vLLM's order on the distribution softmax(z):
//     min-p (drop tokens with p < MinP·max p), then top-k (keep the K most
//     probable), then top-p over the renormalised survivors (keep the smallest
//     prefix, in descending-probability order, whose mass reaches TopP; a token
//     is kept iff the mass strictly before it is < TopP, so at least one token
//     always survives). Ties in probability are ordered by ascending id so the
//     result never depends on sort stability.
//   - The token is drawn from the survivors, renormalised.
//   - The returned logprob is log_softmax(logits / T)[tok] over the FULL
//     vocabulary — not over the filtered set. That is the quantity a trainer
//     recomputes from its own logits; when it wants the filtered
//     distribution instead it renormalises over the returned support
//     (see SupportLogProb), as SkyRL's sample-support replay does.
//   - support lists the surviving candidate ids in descending probability
//     (ties by ascending id). It is nil when no filter is active
//     (TopK = 0 or ≥ vocab, TopP = 1, MinP = 0): the support is then the whole
//     vocabulary and storing it per token would be waste.
//
// # Allocation
//
// Sample does not allocate when given a *Scratch: the returned support slice
// ALIASES the scratch buffer and is valid only until the next call with the
// same Scratch. Callers that keep it (e.g. to store per-token support sets)
// must copy it. A Scratch must not be shared between goroutines.
package sampler
