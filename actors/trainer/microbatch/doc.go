// Package microbatch is the trainer's dynamic microbatching core: it packs
// a mini-batch's sequences into token-capped microbatches and splits them
// across data-parallel ranks.
//
// # Contract
//
// Pure functions over token counts (one int per sequence); every answer is
// indices into that slice, so the caller moves tokens, logprobs and routes
// together. No goroutines, I/O, clock or randomness; deterministic for
// equal inputs. Bad arguments return errors wrapping ErrInvalid,
// ErrOversize or ErrTooFewSequences.
//
// # Semantics (SkyRL)
//
//   - Balanced(tokens, max_tokens_per_microbatch): sort by token count
//     descending (stable: equal counts by ascending index); each sequence
//     goes to the least-loaded bin if it fits there (ties: the earliest
//     bin), else a new bin; a sequence over the cap gets a bin of its own.
//     Off (−1) = one microbatch. Vectors: cap 15 [10,10,5,5] →
//     [[0,2],[1,3]]; cap 10 [10,1,1,1,1,1] → [[0],[1,2,3,4,5]]; cap 50
//     [100,10,10] → [[0],[1,2]]; [100] → [[0]]; cap 10 [3,5,2] → [[1,0,2]].
//   - FirstFitDecreasing (SFT packing): sort (length, index) pairs
//     descending (equal lengths by DESCENDING index), first bin where it
//     fits; a sequence over the cap is ErrOversize; the bin count is raised
//     to ≥ min_bin_count and to a multiple of bin_count_multiple (the DP
//     size) as SkyRL's _adjust_bin_count: bins ranked by (size, index)
//     descending, each new bin takes one sequence popped from the end of
//     the first ranked bin still holding more than one. More bins than
//     sequences is ErrTooFewSequences. [10,10,10] with min_bin_count 3 →
//     [[2],[0],[1]].
//   - Every bin lists its indices in insertion order and bins come in
//     opening order — exactly SkyRL's answer (skyrl/train/dataset/
//     bin_packing.py), so a plan can be compared with SkyRL's bin for bin.
//   - Across DP ranks: Contiguous is SkyRL's equal contiguous chunks (when
//     the mini-batch is not a multiple of the DP size we allow chunks one
//     apart instead of failing). Build pads every rank to the same number of
//     microbatches with Padding microbatches (one valid token, loss_mask 0,
//     materialised by the caller) so collectives never hang.
//
// # What asyncrl adds
//
// StrategyKarmarkarKarp: the k-way largest differencing method as verl,
// slime and AReaL use it, on a selectable cost — Tokens() or FLOPs(a, b)
// = a·L + b·L² (attention makes long sequences cost more than their token
// share). EqualSize gives every rank the same number of sequences. LDM is
// better than longest-processing-time greedy on most inputs but not all
// (k=2, [2,2,5,6,8,15,17,21,24]: LDM 1.02 vs LPT 1.0), so Partition also
// runs Greedy and keeps the better split — its imbalance is never worse
// than LPT's. Plan.Imbalance reports max/mean rank cost.
package microbatch
