package dataplane

import (
	"fmt"
	"io"
)

// Buffer is an in-memory byte space usable as a source (io.ReaderAt) and a
// sink (io.WriterAt). Backends recognise it (through Slicer) and move bytes
// straight into or out of it, skipping an intermediate copy.
type Buffer []byte

// Slicer exposes a sink's or source's memory so backends can read a socket
// directly into it or memmove from a mapping. Slice returns b[off:off+n] or
// an error when the window is out of bounds.
type Slicer interface {
	Slice(off, n int64) ([]byte, error)
}

var (
	_ io.ReaderAt = Buffer(nil)
	_ io.WriterAt = Buffer(nil)
	_ Slicer      = Buffer(nil)
)

// Slice implements Slicer.
func (b Buffer) Slice(off, n int64) ([]byte, error) {
	if off < 0 || n < 0 || off+n > int64(len(b)) {
		return nil, fmt.Errorf("dataplane: window %d+%d outside buffer of %d bytes: %w", off, n, len(b), io.ErrShortBuffer)
	}
	return b[off : off+n : off+n], nil
}

// ReadAt implements io.ReaderAt.
func (b Buffer) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("dataplane: negative offset %d", off)
	}
	if off >= int64(len(b)) {
		return 0, io.EOF
	}
	n := copy(p, b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// WriteAt implements io.WriterAt; it never grows the buffer.
func (b Buffer) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > int64(len(b)) {
		return 0, fmt.Errorf("dataplane: write %d+%d outside buffer of %d bytes: %w", off, len(p), len(b), io.ErrShortWrite)
	}
	return copy(b[off:], p), nil
}
