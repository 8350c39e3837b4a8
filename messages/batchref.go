package messages

import (
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/zeebo/xxh3"
)

// ErrBadBatch is wrapped by BatchRef.Resolve when a fetched batch is not
// the one referenced (size, checksum or group differ).
var ErrBadBatch = errors.New("messages: referenced batch does not match")

// BatchChecksum is the checksum a BatchRef carries for an encoded token
// batch: "xxh3-128:<hex>", the algorithm the weight deltas use.
func BatchChecksum(p []byte) string {
	b := xxh3.Hash128(p).Bytes()
	return "xxh3-128:" + hex.EncodeToString(b[:])
}

// InlineRef is the reference that carries the encoded token batch data
// itself, with its size and checksum (what a rollout hands on before the
// batch is stored).
func InlineRef(data []byte) BatchRef {
	return BatchRef{Inline: data, Bytes: int64(len(data)), Checksum: BatchChecksum(data)}
}

// Stored reports whether r points at a stored message (Subject and Seq)
// rather than holding the bytes inline.
func (r BatchRef) Stored() bool { return r.Subject != "" && r.Seq > 0 }

// Check verifies that p is the batch r describes: r.Bytes (when set) and
// r.Checksum (when set) must match.
func (r BatchRef) Check(p []byte) error {
	if r.Bytes > 0 && int64(len(p)) != r.Bytes {
		return fmt.Errorf("%w: %d bytes, the reference says %d", ErrBadBatch, len(p), r.Bytes)
	}
	if r.Checksum != "" {
		if got := BatchChecksum(p); got != r.Checksum {
			return fmt.Errorf("%w: checksum %s, the reference says %s", ErrBadBatch, got, r.Checksum)
		}
	}
	return nil
}

// Resolve returns the token batch bytes of group's reference r: r.Inline,
// or — for a stored reference — the batch inside stored, the payload read
// back from r's stream at r.Seq (an encoded GroupReady, as the rollout
// actor stored it). Either way the bytes must match r's size and checksum,
// and a stored group must be group: a wrong message at that sequence is
// an error, never a batch trained in its place.
func (r BatchRef) Resolve(group string, stored []byte) ([]byte, error) {
	p := r.Inline
	if r.Stored() {
		m, err := DecodeAs[GroupReady](stored)
		if err != nil {
			return nil, fmt.Errorf("%w: %s seq %d: %w", ErrBadBatch, r.Subject, r.Seq, err)
		}
		if m.GroupID != group {
			return nil, fmt.Errorf("%w: %s seq %d holds group %s, not %s", ErrBadBatch, r.Subject, r.Seq, m.GroupID, group)
		}
		p = m.Batch.Inline
	}
	if len(p) == 0 {
		return nil, fmt.Errorf("%w: group %s: no bytes (neither inline nor a stored reference)", ErrBadBatch, group)
	}
	if err := r.Check(p); err != nil {
		return nil, fmt.Errorf("group %s: %w", group, err)
	}
	return p, nil
}
