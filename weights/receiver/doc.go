// Package receiver is the engine-side agent of delta weight sync: it keeps
// a mutable local copy of the checkpoint, brings it to a target version by
// replaying delta versions from a store, and then tells the engine to load
// it. It follows SkyRL's receiver (reference/skyrl.md) so the two can share
// a sync directory and a local state.
//
// # Layout and state
//
// Under Config.Root: weights/ (the mutable copy, initialised from
// BaseModelPath = version 0) and .skyrl_weight_sync/ holding state.json
// {version, write_in_progress, target_version (null when idle),
// base_model_path} and writer.lock; deltas/ caches fetched versions
// (delta-{v:08d}/, full-{v:08d}/). Every state change happens under an
// exclusive flock on writer.lock, the lock SkyRL's receiver takes, so two
// receivers (or a receiver and a SkyRL process) on one root never
// interleave.
//
// # Protocol
//
// Fetch downloads the versions between the local version and the target;
// it is meant to run while the engine still serves (before it pauses).
// Apply replays them in order: each manifest must say version == expected
// and base_version == current, or the chain is refused (ErrChain) without
// touching the weights. write_in_progress is set before a version is
// patched and cleared after it is synced; on a checksum or payload error
// the cached delta is deleted and write_in_progress stays set, so the next
// Apply resets weights/ from the base and replays from 0 (refetching) —
// half-applied weights are never loaded. Load hands weights/ to the engine
// (only this step needs the pause). Sync does all three.
package receiver
