// Package plan is the sharded weight-transfer planner: given how a trainer
// and an inference fleet shard the same model (TP, PP, DP, EP), it computes
// which trainer rank sends which bytes to which inference rank, so every
// inference rank receives exactly the bytes it holds — the layout-aware,
// many-to-many pull SkyRL uses instead of a broadcast from rank 0.
//
// # Contract
//
//   - Pure core: no goroutines, I/O, clocks or randomness. Same input, same
//     plan, byte for byte.
//   - Sharding model (Layout): ranks are numbered (pp·DP + dp)·TP + tp.
//     Layers split into PP contiguous stages; LayerEmbed pins a tensor to
//     the first stage and LayerHead to the last. A dense tensor is split
//     along Tensor.TPDim into TP equal parts (TPDim < 0: every TP rank holds
//     it whole) and replicated over DP. Routed-expert tensors
//     (Tensor.Expert >= 0) are never TP-split: the DP·TP ranks of a stage
//     form EP expert groups (ep = (dp·TP + tp) mod EP) holding contiguous
//     blocks of Experts/EP experts, each block replicated (DP·TP)/EP times.
//   - Every rank stores its shards back to back in model tensor order, each
//     shard row-major with the split dimension cut to its part (Offsets).
//     A Transfer moves the slab [Lo, Hi) of the split dimension of one
//     tensor; its Run gives the bytes in both ranks' buffers as Count
//     blocks of Len bytes at SrcOff/DstOff + k·SrcStride/DstStride (Count is
//     1 unless the split dimension is not the outermost).
//   - Spreading: each piece an inference rank needs is sent by a trainer
//     rank that owns it; among replicas (DP copies, expert-group copies) the
//     least-loaded one (bytes assigned so far; ties to the lowest rank) is
//     chosen, and a piece of at least Config.SplitBytes is cut into one slab
//     per replica so one destination pulls from all of them at once.
//   - Validate checks a plan independently of how it was built: every
//     (inference rank, tensor) slab is covered exactly once (ErrMissing,
//     ErrOverlap), senders own what they send (ErrNotOwned), and every Run
//     matches the layouts' byte offsets (ErrBadRun).
//   - Presets (Qwen3-235B-A22B, Kimi K2, GLM-4.5) are synthetic tensor lists
//     from the public configs — layers, experts, hidden and FFN sizes — with
//     the published trainer/inference layouts; "builtin" is the built-in
//     policy's own tensors (BuiltinPolicy). PresetByName finds one;
//     ParseLayout reads "tp4,pp2,ep8".
//   - EstimateSync is the transfer-time model: for a plan on a Cluster
//     (GPUs and NICs per node, NIC and NVLink rates) it estimates an NCCL
//     broadcast from trainer rank 0 (gather, then every byte to every
//     receiver through rank 0's NIC) against the plan's pull (the busiest
//     rank or node). Bandwidth terms only: a floor to compare the two with,
//     not a prediction of a measured run.
package plan
