// Package latency is the pure core that models a GPU inference server's
// timing: continuous batching, prefill, decode and a block prefix cache.
//
// It holds no goroutines, locks, clocks or I/O. The caller (the engine's
// loop) adds requests, asks Schedule for the next step, computes one real
// token for every sequence the step lists, reports it with Append and ends
// sequences with Finish. Time exists only as the modelled durations Schedule
// returns and the modelled clock (Now) they add up to.
//
// # Scheduling (one step)
//
//  1. Every running sequence needs KV slots for all its tokens. When the
//     cache cannot supply a block, the most recently admitted running
//     sequence is preempted (its blocks are released and it goes back to
//     the FRONT of the queue, to be recomputed later), as vLLM does.
//
//  2. While fewer than MaxNumSeqs run, the head of the FIFO queue is
//     admitted if its uncached blocks fit (free blocks, or unreferenced
//     cached blocks evicted least recently used first). Head-of-line
//     blocking is deliberate: FIFO order, never an error.
//
//  3. Every running sequence produces one token. The step costs
//
//     step = DecodeBase + DecodePerSeq·batch + PrefillPerToken·uncached
//
//     where batch is the number of running sequences and uncached the
//     prompt tokens admitted this step that missed the prefix cache.
//
// A lone request with P prompt tokens of which C hit the cache therefore
// sees time-to-first-token = DecodeBase + DecodePerSeq + PrefillPerToken·(P−C)
// plus its modelled queueing time.
//
// # Prefix cache
//
// Tokens live in blocks of BlockSize. A full block is keyed by a hash that
// chains the previous block's key with the block's tokens (and a per-request
// salt, e.g. the LoRA adapter), so a key names a whole prefix. At admission
// the longest run of cached keys is reused, capped so that at least one
// prompt token is computed (the step needs logits). Released blocks stay
// cached until evicted. Counters follow vLLM: queries and hits are counted
// in prompt tokens at admission; KV usage is referenced blocks / capacity.
package latency
