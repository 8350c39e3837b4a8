// Package bridge is the Go side of the trainer worker bridge (frames v1,
// docs/protocol.md "Trainer worker bridge"): the trainer actor's exec
// backend starts a child process (trainer.exec, e.g. a PyTorch worker) and
// drives it over its stdin/stdout with length-prefixed CBOR frames.
//
//   - frame.go: the codec — u32 little-endian length + one CBOR map with
//     text keys, at most MaxFrameBytes; typed errors for oversize,
//     truncated and undecodable frames; tensors (dtype, shape, data).
//   - child.go: one child process — Init/TrainBatch/SaveCheckpoint/
//     Shutdown calls, one in flight, each with a deadline; the child's
//     stderr goes to the log line by line; ErrChildExited, ErrDeadline and
//     *ChildError (the child's Error frame) tell the outcomes apart.
//   - supervisor.go: a child that exits or misses a step's deadline is
//     killed (SIGKILL to its process group), a new one is started with
//     Init{resume: the last completed step's state, step: that step} and
//     the same TrainBatch is sent again, so no batch is lost and none is
//     trained twice; bounded consecutive restarts with exponential backoff.
//   - builtin.go: a child in Go — the built-in policy trainer behind the
//     frames (`asyncrl worker child`): the reference implementation of
//     the child side and the child the tests drive.
//
// The package imports policy (the built-in child and the loss-key mapping)
// and zerolog; never the trainer actor, which imports it.
package bridge
