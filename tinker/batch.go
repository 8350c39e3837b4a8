package tinker

import (
	"fmt"
	"slices"
	"strings"
)

// A batch's chunks. The SDK splits one forward/forward_backward call's
// data into chunks and sends each as its own request with the next seq_id
// (TrainingClient._chunked_requests_generator and _run_fwd_bwd in
// src/tinker/lib/public_interfaces/training_client.py,
// thinking-machines-lab/tinker 6b025363 = 0.24.1, d595dc2b = 0.25.0): a
// chunk is closed when it holds SDKChunkLen data, or when the next datum
// would take its estimated size past SDKChunkBytes (0.24.1 estimates 10
// bytes per token and per loss-input value; 0.25.0 4 bytes per token plus
// each loss input's array bytes, with both limits from client/config,
// whose defaults this server keeps). A datum's index in a request is
// therefore not its index in the user's batch. The server places each
// request in its batch so that a refused datum is named by its index in
// the whole batch: a request continues the model's previous one when it
// has the next seq_id, the same op, loss and loss config, and the previous
// one was closed full by the rule above. Two separate calls of which the
// first was exactly full read as one batch (the rule cannot tell them
// apart); the error message says which requests it counted.
//
// This needs the chunks to arrive in seq_id order, which is what the SDK
// does when client/config sets parallel_fwdbwd_chunks false (this server
// does). In parallel mode the SDK sends chunks 2..n at once and chunk 1
// last, and if any of 2..n is answered with an HTTP error it never sends
// chunk 1 and every later call of the training client waits for ever for
// its turn (TrainingClient._take_turn); 0.24.1's forward sends its chunks
// in a loop that stops at the first HTTP error, leaving the later chunks'
// turns untaken in any mode. So a refused datum is never an HTTP error
// here but a failed future.
const (
	SDKChunkLen   = 1024
	SDKChunkBytes = 5_000_000
)

// ChunkStats describes one forward/forward_backward request.
type ChunkStats struct {
	Seq int64
	// Key is the op, loss_fn and loss_fn_config: a batch's chunks share it.
	Key string
	// N is the number of data in the request.
	N int
	// Bytes10 and Bytes4 are the request's size by 0.24.1's and 0.25.0's
	// estimates; First10 and First4 its first datum's.
	Bytes10, Bytes4, First10, First4 int64
}

// ChunkStatsOf measures a request's data the way the SDK does.
func ChunkStatsOf(seq int64, op string, in *ForwardBackwardInput) ChunkStats {
	keys := make([]string, 0, len(in.LossFnConfig))
	for k, v := range in.LossFnConfig {
		keys = append(keys, fmt.Sprintf("%s=%v", k, v))
	}
	slices.Sort(keys)
	st := ChunkStats{Seq: seq, Key: op + "/" + in.LossFn + "/" + strings.Join(keys, ","), N: len(in.Data)}
	for i, d := range in.Data {
		var b10, b4 int64
		for _, c := range d.ModelInput.Chunks {
			b10 += 10 * int64(len(c.Tokens))
			b4 += 4 * int64(len(c.Tokens))
		}
		for _, td := range d.LossFnInputs {
			b10 += 10 * int64(len(td.Data))
			size := int64(4) // float32, int32
			if td.DType == "int64" || td.DType == "float64" {
				size = 8
			}
			b4 += size * int64(len(td.Data))
		}
		if i == 0 {
			st.First10, st.First4 = b10, b4
		}
		st.Bytes10 += b10
		st.Bytes4 += b4
	}
	return st
}

// closedBy reports whether the SDK would have closed chunk p before
// adding next's first datum.
func (p ChunkStats) closedBy(next ChunkStats) bool {
	return p.N >= SDKChunkLen || p.Bytes10+next.First10 > SDKChunkBytes || p.Bytes4+next.First4 > SDKChunkBytes
}

// BatchPos is where a request sits in its batch.
type BatchPos struct {
	// Offset is the batch index of the request's data[0].
	Offset int
	// StartSeq is the seq_id of the batch's first request.
	StartSeq int64
	// Refused is the batch index of a datum refused in an earlier request
	// of the batch, -1 if none; RefusedSeq that request's seq_id.
	Refused    int
	RefusedSeq int64
}

type chunkRec struct {
	ChunkStats
	pos BatchPos
}

// PlaceChunk records a forward/forward_backward request of a loaded model
// and returns its place in its batch.
func (c *Core) PlaceChunk(modelID string, st ChunkStats) BatchPos {
	pos := BatchPos{StartSeq: st.Seq, Refused: -1}
	if _, ok := c.models[modelID]; !ok {
		return pos
	}
	if prev, ok := c.chunks[modelID]; ok && st.Seq == prev.Seq+1 && st.Key == prev.Key && prev.closedBy(st) {
		pos = BatchPos{Offset: prev.pos.Offset + prev.N, StartSeq: prev.pos.StartSeq, Refused: prev.pos.Refused, RefusedSeq: prev.pos.RefusedSeq}
	}
	c.chunks[modelID] = chunkRec{ChunkStats: st, pos: pos}
	return pos
}

// RefuseChunk records that request seq of the model was refused at batch
// index i, so the batch's later requests are refused too (none of the
// batch after a bad datum trains).
func (c *Core) RefuseChunk(modelID string, seq int64, i int) {
	r, ok := c.chunks[modelID]
	if !ok || r.Seq != seq || r.pos.Refused >= 0 {
		return
	}
	r.pos.Refused, r.pos.RefusedSeq = i, seq
	c.chunks[modelID] = r
}

// InBatch rewrites a request's field errors to name data by their index
// in the whole batch (loc [..., "data", i, ...] → i+pos.Offset) and joins
// them into one message for a failed future.
func InBatch(errs FieldErrors, pos BatchPos, seq int64) (msg string, first int) {
	first = -1
	parts := make([]string, 0, len(errs))
	for _, fe := range errs {
		loc := slices.Clone(fe.Loc)
		for j := 0; j+1 < len(loc); j++ {
			if loc[j] == "data" {
				if i, ok := loc[j+1].(int); ok {
					loc[j+1] = i + pos.Offset
					if first < 0 || i+pos.Offset < first {
						first = i + pos.Offset
					}
				}
				break
			}
		}
		parts = append(parts, fmt.Sprintf("%s: %s", locString(loc), fe.Msg))
	}
	msg = strings.Join(parts, "; ")
	if pos.Offset > 0 {
		msg += fmt.Sprintf(" (data indices are the batch's: this request, seq_id %d, holds data[%d:] of the batch the SDK sent in chunks from seq_id %d)", seq, pos.Offset, pos.StartSeq)
	}
	return msg + "; nothing of this request trained", first
}

// locString writes a FastAPI loc as body.field.data[3].model_input.
func locString(loc []any) string {
	var b strings.Builder
	for i, p := range loc {
		switch v := p.(type) {
		case int:
			fmt.Fprintf(&b, "[%d]", v)
		default:
			if i > 0 {
				b.WriteByte('.')
			}
			fmt.Fprint(&b, v)
		}
	}
	return b.String()
}
