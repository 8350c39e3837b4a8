package safetensors

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// File is an open safetensors file. Only the header is read up front.
type File struct {
	Header
	r         io.ReaderAt
	closer    io.Closer
	dataStart int64
	byName    map[string]int
}

// Open opens path and parses its header.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	sf, err := NewReader(f, st.Size())
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	sf.closer = f
	return sf, nil
}

// NewReader parses the header of a safetensors file of size bytes read
// through r. The caller keeps ownership of r.
func NewReader(r io.ReaderAt, size int64) (*File, error) {
	if size < 8 {
		return nil, fmt.Errorf("%w: %d bytes is too short for the 8-byte header length", ErrFormat, size)
	}
	var lenBuf [8]byte
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		return nil, fmt.Errorf("%w: reading header length: %v", ErrFormat, err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > MaxHeaderSize {
		return nil, fmt.Errorf("%w: header length %d exceeds the %d-byte limit", ErrFormat, n, MaxHeaderSize)
	}
	if int64(n) > size-8 {
		return nil, fmt.Errorf("%w: header length %d runs past the end of the %d-byte file", ErrFormat, n, size)
	}
	js := make([]byte, n)
	if _, err := r.ReadAt(js, 8); err != nil {
		return nil, fmt.Errorf("%w: reading header: %v", ErrFormat, err)
	}
	h, err := ParseHeader(js, size-8-int64(n))
	if err != nil {
		return nil, err
	}
	f := &File{Header: *h, r: r, dataStart: 8 + int64(n), byName: make(map[string]int, len(h.Tensors))}
	for i, t := range h.Tensors {
		f.byName[t.Name] = i
	}
	return f, nil
}

// Close closes the underlying file when Open opened it.
func (f *File) Close() error {
	if f.closer != nil {
		return f.closer.Close()
	}
	return nil
}

// Names returns the tensor names sorted.
func (f *File) Names() []string {
	names := make([]string, 0, len(f.Tensors))
	for _, t := range f.Tensors {
		names = append(names, t.Name)
	}
	slices.Sort(names)
	return names
}

// Info returns a tensor's description.
func (f *File) Info(name string) (TensorInfo, error) {
	i, ok := f.byName[name]
	if !ok {
		return TensorInfo{}, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	return f.Tensors[i], nil
}

// TensorReader returns a reader over one tensor's bytes only.
func (f *File) TensorReader(name string) (*io.SectionReader, TensorInfo, error) {
	t, err := f.Info(name)
	if err != nil {
		return nil, t, err
	}
	return io.NewSectionReader(f.r, f.dataStart+t.Begin, t.Size()), t, nil
}

// ReadTensor reads one tensor's bytes (little-endian, C order).
func (f *File) ReadTensor(name string) ([]byte, TensorInfo, error) {
	sr, t, err := f.TensorReader(name)
	if err != nil {
		return nil, t, err
	}
	b := make([]byte, t.Size())
	if _, err := io.ReadFull(sr, b); err != nil {
		return nil, t, fmt.Errorf("%w: tensor %q: %v", ErrFormat, name, err)
	}
	return b, t, nil
}

// ReadFloat32 reads an F32, BF16 or F16 tensor as float32.
func (f *File) ReadFloat32(name string) ([]float32, TensorInfo, error) {
	b, t, err := f.ReadTensor(name)
	if err != nil {
		return nil, t, err
	}
	out, err := DecodeFloat32(t.DType, b, nil)
	if err != nil {
		return nil, t, fmt.Errorf("tensor %q: %w", name, err)
	}
	return out, t, nil
}

// Tensor is a tensor to write.
type Tensor struct {
	Name  string
	DType DType
	Shape []int64
	Data  []byte
}

// Spec declares a tensor's name, dtype and shape for StreamWriter.
type Spec struct {
	Name  string
	DType DType
	Shape []int64
}

// layoutSpecs validates specs and assigns contiguous offsets in order.
func layoutSpecs(specs []Spec) ([]TensorInfo, error) {
	seen := make(map[string]bool, len(specs))
	var pos int64
	out := make([]TensorInfo, 0, len(specs))
	for _, s := range specs {
		if s.Name == "" || s.Name == metadataKey {
			return nil, fmt.Errorf("%w: invalid tensor name %q", ErrFormat, s.Name)
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("%w: duplicate tensor name %q", ErrFormat, s.Name)
		}
		seen[s.Name] = true
		if err := s.DType.check(); err != nil {
			return nil, fmt.Errorf("tensor %q: %w", s.Name, err)
		}
		t := TensorInfo{Name: s.Name, DType: s.DType, Shape: s.Shape, Begin: pos}
		for _, d := range s.Shape {
			if d < 0 {
				return nil, fmt.Errorf("%w: tensor %q: negative dimension in shape %v", ErrFormat, s.Name, s.Shape)
			}
		}
		t.End = pos + t.NumElements()*int64(s.DType.Size())
		pos = t.End
		out = append(out, t)
	}
	return out, nil
}

// StreamWriter writes a safetensors file tensor by tensor: the layout is
// declared up front (the header comes first), then each tensor's bytes are
// written in declaration order, in as many Write calls as convenient.
type StreamWriter struct {
	w       io.Writer
	tensors []TensorInfo
	cur     int   // index of the tensor being written
	written int64 // bytes written into the data section
	err     error
}

// NewStreamWriter writes the header for specs and metadata to w.
func NewStreamWriter(w io.Writer, specs []Spec, metadata map[string]string) (*StreamWriter, error) {
	ts, err := layoutSpecs(specs)
	if err != nil {
		return nil, err
	}
	hdr, err := encodeHeader(ts, metadata)
	if err != nil {
		return nil, err
	}
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(hdr)))
	if _, err := w.Write(lenBuf[:]); err != nil {
		return nil, fmt.Errorf("safetensors: writing header: %w", err)
	}
	if _, err := w.Write(hdr); err != nil {
		return nil, fmt.Errorf("safetensors: writing header: %w", err)
	}
	return &StreamWriter{w: w, tensors: ts}, nil
}

// Write appends data bytes; it refuses to write past the declared layout.
func (s *StreamWriter) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	total := int64(0)
	if n := len(s.tensors); n > 0 {
		total = s.tensors[n-1].End
	}
	if s.written+int64(len(p)) > total {
		return 0, fmt.Errorf("%w: %d bytes written past the declared %d data bytes", ErrFormat, s.written+int64(len(p))-total, total)
	}
	n, err := s.w.Write(p)
	s.written += int64(n)
	if err != nil {
		s.err = fmt.Errorf("safetensors: writing data: %w", err)
		return n, s.err
	}
	return n, nil
}

// WriteTensor writes the next declared tensor's complete bytes, checking its
// name and size against the declaration. Use either WriteTensor for every
// tensor or raw Write calls, not a mix.
func (s *StreamWriter) WriteTensor(name string, data []byte) error {
	if s.cur >= len(s.tensors) {
		return fmt.Errorf("%w: tensor %q written after the last declared tensor", ErrFormat, name)
	}
	t := s.tensors[s.cur]
	if t.Name != name {
		return fmt.Errorf("%w: tensor %q written where %q was declared", ErrFormat, name, t.Name)
	}
	if s.written != t.Begin || int64(len(data)) != t.Size() {
		return fmt.Errorf("%w: tensor %q: got %d bytes at data offset %d, declared %d at %d", ErrFormat, name, len(data), s.written, t.Size(), t.Begin)
	}
	_, err := s.Write(data)
	s.cur++
	return err
}

// Close checks that every declared byte was written. It does not close the
// underlying writer.
func (s *StreamWriter) Close() error {
	if s.err != nil {
		return s.err
	}
	var total int64
	if n := len(s.tensors); n > 0 {
		total = s.tensors[n-1].End
	}
	if s.written != total {
		return fmt.Errorf("%w: %d of %d declared data bytes written", ErrFormat, s.written, total)
	}
	return nil
}

// Write writes tensors (in the given order) and metadata as one file.
func Write(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	specs := make([]Spec, len(tensors))
	for i, t := range tensors {
		specs[i] = Spec{Name: t.Name, DType: t.DType, Shape: t.Shape}
	}
	sw, err := NewStreamWriter(w, specs, metadata)
	if err != nil {
		return err
	}
	for _, t := range tensors {
		if err := sw.WriteTensor(t.Name, t.Data); err != nil {
			return err
		}
	}
	return sw.Close()
}

// Marshal returns the file bytes for tensors and metadata.
func Marshal(tensors []Tensor, metadata map[string]string) ([]byte, error) {
	var b bytes.Buffer
	if err := Write(&b, tensors, metadata); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// WriteFile writes tensors to path atomically: a temporary file in the same
// directory is synced and renamed over path, so readers never see a partial
// checkpoint. The file is mode 0644 (os.CreateTemp's 0600 would keep a
// vLLM server running as another user from reading the checkpoint).
func WriteFile(path string, tensors []Tensor, metadata map[string]string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if err := Write(tmp, tensors, metadata); err != nil {
		tmp.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("safetensors: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	if err := os.Chmod(tmp.Name(), FileMode); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}

// FileMode is the mode of the files WriteFile and WriteSharded write:
// readable by every user, as torch's and transformers' writers leave them.
const FileMode = 0o644
