package dataplane

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/asyncrl/asyncrl/messages"
)

// Backend moves the bytes of transfer plans. Implementations are safe for
// concurrent use; one Backend serves many transfers at once.
type Backend interface {
	// Name is the short, stable backend name used in preference lists
	// ("tcp", "shm", "nccl", "nixl").
	Name() string
	// Available reports whether the backend can move bytes on this host; an
	// error wraps ErrUnavailable and says why (a dlopen error, a missing
	// directory).
	Available() error
	// Publish makes the plan's ranges of src reachable by its destinations
	// and returns the Offer whose URI the plan must carry. src must stay
	// unchanged until the Offer is closed.
	Publish(ctx context.Context, p *messages.TransferPlan, src io.ReaderAt) (Offer, error)
	// Fetch pulls every range of p from p.URI into dst at the range's
	// offset, verifies each checksum, and returns once all bytes arrived.
	Fetch(ctx context.Context, p *messages.TransferPlan, dst io.WriterAt) (Result, error)
}

// Offer is published data, reachable at URI until Close.
type Offer interface {
	// URI locates the bytes; it goes into TransferPlan.URI.
	URI() string
	// Close withdraws the data; later fetches fail with ErrUnknownTransfer.
	// Once it returns the backend no longer reads the source, so the caller
	// may reuse that memory (in-flight sends are interrupted, not awaited
	// to completion).
	Close() error
}

// Result describes a completed fetch.
type Result struct {
	// Bytes received and verified.
	Bytes int64
	// Reconnects counts broken connections the fetch recovered from by
	// resuming at the last verified offset (TCP only).
	Reconnects int
}

// Sentinel errors; backends wrap them with context.
var (
	// ErrUnavailable: the backend cannot run on this host.
	ErrUnavailable = errors.New("dataplane: unavailable")
	// ErrChecksum: a range's bytes did not match its checksum.
	ErrChecksum = errors.New("dataplane: checksum mismatch")
	// ErrIncomplete: the transfer stopped before every range arrived
	// (retries exhausted, context ended).
	ErrIncomplete = errors.New("dataplane: incomplete transfer")
	// ErrUnknownTransfer: the source does not (or no longer) publish the id.
	ErrUnknownTransfer = errors.New("dataplane: unknown transfer")
	// ErrBadPlan: the plan is malformed (overlapping or negative ranges, bad
	// checksum spec, missing URI).
	ErrBadPlan = errors.New("dataplane: bad plan")
	// ErrNotImplemented: the backend loaded but cannot move bytes yet.
	ErrNotImplemented = errors.New("dataplane: not implemented")
)

// RangeError is a failure tied to one range of a plan.
type RangeError struct {
	// Index of the range in the plan's Ranges.
	Index int
	// Range is a copy of the failing range.
	Range messages.ByteRange
	// Err is the cause (wraps one of the sentinels).
	Err error
}

func (e *RangeError) Error() string {
	return fmt.Sprintf("range %d (%s): %v", e.Index, e.Range.String(), e.Err)
}

func (e *RangeError) Unwrap() error { return e.Err }

// DoneMessage is the control message a destination publishes after a
// successful Fetch.
func DoneMessage(p *messages.TransferPlan, dest string, r Result) messages.TransferDone {
	return messages.TransferDone{
		Header:      messages.Header{RunID: p.RunID, Sender: dest, Version: p.Version},
		TransferID:  p.TransferID,
		Destination: dest,
		Bytes:       r.Bytes,
	}
}

// FailedMessage is the control message a destination publishes when Fetch
// failed; Range is the failing range's index, or -1 when the failure is not
// tied to one range.
func FailedMessage(p *messages.TransferPlan, dest string, err error) messages.TransferFailed {
	idx := int32(-1)
	var re *RangeError
	if errors.As(err, &re) {
		idx = int32(re.Index)
	}
	return messages.TransferFailed{
		Header:      messages.Header{RunID: p.RunID, Sender: dest, Version: p.Version},
		TransferID:  p.TransferID,
		Destination: dest,
		Reason:      err.Error(),
		Range:       idx,
	}
}
