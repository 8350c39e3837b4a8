// Package assemble builds a trainer step's mini-batch from a TrainBatch's
// group references (issue 31: batches by reference). The controller sends
// references — where each group's token batch is stored, whether
// zero_variance_mask zeroes it, and in replace mode which slots each group
// fills — and the trainer, after fetching every referenced batch, calls
// Batch to concatenate them into one TokenBatch.
//
// # Contract
//
//   - Pure: no I/O, clock or goroutines. The real trainer and the
//     simulator's trainer call the same function, so the mini-batch the
//     simulator checks is the one a run trains.
//   - data[i] is Groups[i]'s Arrow IPC token batch, already checked
//     against its reference (messages.BatchRef.Resolve).
//   - A group flagged ZeroMask has the loss mask of every one of its
//     trajectories zeroed (a dead one's is zero already): it is carried,
//     trains nothing, and no other group's mask changes.
//   - Slots nil: each group once, in order. Otherwise slot i takes
//     Groups[Slots[i].Group]; a Copy keeps the group id and renames its
//     trajectories "<id>~copy<i>".
//   - Anything inconsistent (a slot out of range, a batch that does not
//     decode, a trajectory of another group, a batch with another
//     shape) is an error naming the group: the step fails, it never
//     trains a partial batch.
package assemble
