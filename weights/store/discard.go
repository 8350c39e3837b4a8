package store

import (
	"context"
	"io"
)

// Discard is a Store that reads and drops every payload and holds
// nothing (Get: ErrNotFound): what publishing costs without the store's
// own I/O, for benchmarks.
type Discard struct{}

var _ Store = Discard{}

// Put reads r to its end and drops it.
func (Discard) Put(_ context.Context, _ string, r io.Reader, _ int64) error {
	_, err := io.Copy(io.Discard, r)
	return err
}

// Get finds nothing.
func (Discard) Get(context.Context, string) (io.ReadCloser, error) { return nil, ErrNotFound }

// List lists nothing.
func (Discard) List(context.Context, string) ([]string, error) { return nil, nil }

// Delete does nothing.
func (Discard) Delete(context.Context, string) error { return nil }

// Commit does nothing.
func (Discard) Commit(context.Context, string, []byte) error { return nil }
