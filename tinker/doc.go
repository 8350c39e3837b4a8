// Package tinker is the core of asyncrl's Tinker-compatible API server
// (docs/tinker.md): the wire types the tinker SDK sends (≤ v0.24.1, JSON),
// their validation into FastAPI-style 422 details naming the field, and
// Core, the server's state.
//
// Core is a pure core (docs/cores.md): time is an input, no goroutines,
// locks or I/O; the HTTP shell (tinker/server) serialises it. It holds
// sessions and their heartbeats (Tick closes a session silent for
// SessionTimeout and returns the models to unload), models, sampling
// sessions, and futures: Submit makes a future, idempotent on
// (model or sampling session, seq_id) and the body's hash — a retry gets
// the same request id, another body ErrConflict — within per-session
// quotas; Complete stores the encoded result once; finished results are
// evicted oldest first past ResultTTL or ResultMaxBytes, and an evicted
// id's Lookup says why (bounded tombstones). Training futures are also
// persisted by the shell, so their eviction from memory loses nothing.
//
// PlaceChunk (batch.go) places each forward/forward_backward request in
// the SDK's batch it is a chunk of (consecutive seq_ids, the SDK's chunk
// rule), so that a bad datum is named by its index in the whole batch and
// the batch's later chunks are refused after it (RefuseChunk, InBatch).
package tinker
