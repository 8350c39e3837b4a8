package safetensors

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// StreamReader reads a safetensors file from a non-seekable stream (a
// network connection, a pipe, a decompressor): the header first, then each
// tensor in data order. Tensor bytes are never buffered beyond what the
// caller reads, so a receiver can apply a large checkpoint or delta as it
// arrives.
type StreamReader struct {
	Header
	r    io.Reader
	next int               // index of the next tensor Next returns
	cur  *io.LimitedReader // the tensor being read
}

// NewStreamReader reads and validates the header from r. The data length
// cannot be checked up front; Next reports a stream that ends early.
func NewStreamReader(r io.Reader) (*StreamReader, error) {
	var lenBuf [8]byte
	if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
		return nil, fmt.Errorf("%w: reading header length: %v", ErrFormat, err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > MaxHeaderSize {
		return nil, fmt.Errorf("%w: header length %d exceeds the %d-byte limit", ErrFormat, n, MaxHeaderSize)
	}
	js := make([]byte, n)
	if _, err := io.ReadFull(r, js); err != nil {
		return nil, fmt.Errorf("%w: header length %d runs past the end of the stream: %v", ErrFormat, n, err)
	}
	h, err := ParseHeader(js, -1)
	if err != nil {
		return nil, err
	}
	return &StreamReader{Header: *h, r: r}, nil
}

// Next returns the next tensor in data order and a reader over exactly its
// bytes. Unread bytes of the previous tensor are skipped. After the last
// tensor it returns io.EOF.
func (s *StreamReader) Next() (TensorInfo, io.Reader, error) {
	if s.cur != nil && s.cur.N > 0 {
		if _, err := io.Copy(io.Discard, s.cur); err != nil {
			return TensorInfo{}, nil, fmt.Errorf("safetensors: skipping tensor data: %w", err)
		}
		if s.cur.N > 0 {
			return TensorInfo{}, nil, fmt.Errorf("%w: stream ended inside tensor %q", ErrFormat, s.Tensors[s.next-1].Name)
		}
	}
	if s.next >= len(s.Tensors) {
		return TensorInfo{}, nil, io.EOF
	}
	t := s.Tensors[s.next]
	s.next++
	s.cur = &io.LimitedReader{R: s.r, N: t.Size()}
	return t, &strictReader{lr: s.cur, name: t.Name}, nil
}

// ReadNext is Next followed by reading the whole tensor.
func (s *StreamReader) ReadNext() (TensorInfo, []byte, error) {
	t, r, err := s.Next()
	if err != nil {
		return t, nil, err
	}
	b := make([]byte, t.Size())
	if _, err := io.ReadFull(r, b); err != nil {
		return t, nil, err
	}
	return t, b, nil
}

// strictReader turns a premature end of the underlying stream into an
// ErrFormat error naming the tensor, instead of a silent short read.
type strictReader struct {
	lr   *io.LimitedReader
	name string
}

func (r *strictReader) Read(p []byte) (int, error) {
	if r.lr.N <= 0 {
		return 0, io.EOF
	}
	n, err := r.lr.Read(p)
	if errors.Is(err, io.EOF) && r.lr.N > 0 {
		return n, fmt.Errorf("%w: stream ended inside tensor %q (%d bytes missing)", ErrFormat, r.name, r.lr.N)
	}
	return n, err
}
