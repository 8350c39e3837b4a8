package transport

import (
	"context"
	"errors"
)

// ErrNoMessage is returned by StoredReader.GetMsg for a sequence the
// stream does not hold: never stored, deleted, or dropped by its limits.
var ErrNoMessage = errors.New("transport: no message at that sequence")

// StoredMsg is one message read back from a stream by its sequence.
type StoredMsg struct {
	Subject  string
	Sequence uint64
	Data     []byte
}

// StoredReader is a Stream that reads and deletes stored messages by
// sequence (JetStream: direct get / STREAM.MSG.GET and STREAM.MSG.DELETE).
// Both buses' streams implement it. It is what lets a control message
// carry a reference (stream subject + sequence, messages.BatchRef) instead
// of the bytes: the trainer fetches the trajectory buffer's groups by
// sequence, and the sampling actor deletes each group once the controller
// settled it.
type StoredReader interface {
	// GetMsg returns the message stored at seq, or an error wrapping
	// ErrNoMessage when there is none.
	GetMsg(ctx context.Context, seq uint64) (StoredMsg, error)
	// DeleteMsg deletes the message at seq; deleting one that is already
	// gone is not an error (a second release of one group).
	DeleteMsg(ctx context.Context, seq uint64) error
}
