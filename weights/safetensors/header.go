package safetensors

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// Sentinel errors.
var (
	// ErrFormat marks a malformed safetensors file, index or argument.
	ErrFormat = errors.New("safetensors: malformed")
	// ErrNotFound marks a tensor name that is not in the file or index.
	ErrNotFound = errors.New("safetensors: tensor not found")
)

// MaxHeaderSize bounds the JSON header (the reference uses 100 MB), so a
// corrupt length cannot make a reader allocate gigabytes.
const MaxHeaderSize = 100 << 20

// metadataKey is the reserved header entry for string metadata.
const metadataKey = "__metadata__"

// TensorInfo describes one tensor in a file.
type TensorInfo struct {
	Name  string
	DType DType
	Shape []int64
	// Begin and End are byte offsets relative to the start of the data.
	Begin, End int64
}

// NumElements is the product of the shape (1 for a scalar).
func (t TensorInfo) NumElements() int64 {
	n := int64(1)
	for _, s := range t.Shape {
		n *= s
	}
	return n
}

// Size is the tensor's size in bytes.
func (t TensorInfo) Size() int64 { return t.End - t.Begin }

// Header is a parsed, validated header.
type Header struct {
	// Tensors in data order (ascending offsets).
	Tensors []TensorInfo
	// Metadata is the optional __metadata__ map (nil when absent).
	Metadata map[string]string
	// DataSize is the number of data bytes the tensors cover.
	DataSize int64
}

type rawEntry struct {
	DType       DType   `json:"dtype"`
	Shape       []int64 `json:"shape"`
	DataOffsets []int64 `json:"data_offsets"`
}

// ParseHeader parses and validates the JSON header of a file whose data
// section holds dataLen bytes (dataLen < 0 skips the exact-length check, for
// a header read ahead of its data).
func ParseHeader(js []byte, dataLen int64) (*Header, error) {
	trimmed := bytes.TrimLeft(js, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, fmt.Errorf("%w: header is not a JSON object", ErrFormat)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("%w: header JSON: %v", ErrFormat, err)
	}
	h := &Header{}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%w: header JSON: %v", ErrFormat, err)
		}
		name, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("%w: header JSON: key %v is not a string", ErrFormat, tok)
		}
		if seen[name] {
			return nil, fmt.Errorf("%w: duplicate entry %q", ErrFormat, name)
		}
		seen[name] = true
		if name == metadataKey {
			var md map[string]string
			if err := dec.Decode(&md); err != nil {
				return nil, fmt.Errorf("%w: __metadata__ must map strings to strings: %v", ErrFormat, err)
			}
			h.Metadata = md
			continue
		}
		if name == "" {
			return nil, fmt.Errorf("%w: empty tensor name", ErrFormat)
		}
		var e rawEntry
		if err := dec.Decode(&e); err != nil {
			return nil, fmt.Errorf("%w: tensor %q: %v", ErrFormat, name, err)
		}
		if err := e.DType.check(); err != nil {
			return nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		if e.Shape == nil {
			return nil, fmt.Errorf("%w: tensor %q: missing shape", ErrFormat, name)
		}
		if len(e.DataOffsets) != 2 {
			return nil, fmt.Errorf("%w: tensor %q: data_offsets must be [begin, end], got %v", ErrFormat, name, e.DataOffsets)
		}
		h.Tensors = append(h.Tensors, TensorInfo{Name: name, DType: e.DType, Shape: e.Shape,
			Begin: e.DataOffsets[0], End: e.DataOffsets[1]})
	}
	if _, err := dec.Token(); err != nil { // closing brace
		return nil, fmt.Errorf("%w: header JSON: %v", ErrFormat, err)
	}
	rest, _ := io.ReadAll(dec.Buffered())
	if strings.TrimSpace(string(rest)) != "" {
		return nil, fmt.Errorf("%w: trailing bytes after header JSON", ErrFormat)
	}
	if err := h.validate(dataLen); err != nil {
		return nil, err
	}
	return h, nil
}

// validate checks shapes, sizes and that offsets tile [0, DataSize).
func (h *Header) validate(dataLen int64) error {
	for _, t := range h.Tensors {
		if t.Begin < 0 || t.End < t.Begin {
			return fmt.Errorf("%w: tensor %q: data_offsets [%d, %d] out of order", ErrFormat, t.Name, t.Begin, t.End)
		}
		n := int64(1)
		for _, s := range t.Shape {
			if s < 0 {
				return fmt.Errorf("%w: tensor %q: negative dimension in shape %v", ErrFormat, t.Name, t.Shape)
			}
			if s != 0 && n > math.MaxInt64/s {
				return fmt.Errorf("%w: tensor %q: shape %v overflows", ErrFormat, t.Name, t.Shape)
			}
			n *= s
		}
		sz := int64(t.DType.Size())
		if n > math.MaxInt64/sz || n*sz != t.End-t.Begin {
			return fmt.Errorf("%w: tensor %q: shape %v × %s needs %d bytes but data_offsets span %d",
				ErrFormat, t.Name, t.Shape, t.DType, n*sz, t.End-t.Begin)
		}
	}
	// Stable sort by offset; zero-size tensors keep their header order.
	slices.SortStableFunc(h.Tensors, func(a, b TensorInfo) int {
		return cmp.Or(cmp.Compare(a.Begin, b.Begin), cmp.Compare(a.End, b.End))
	})
	var pos int64
	for _, t := range h.Tensors {
		if t.Begin != pos {
			if t.Begin < pos {
				return fmt.Errorf("%w: tensor %q: data_offsets [%d, %d] overlap the previous tensor (ends at %d)", ErrFormat, t.Name, t.Begin, t.End, pos)
			}
			return fmt.Errorf("%w: tensor %q: gap before data_offsets [%d, %d] (previous tensor ends at %d)", ErrFormat, t.Name, t.Begin, t.End, pos)
		}
		pos = t.End
	}
	h.DataSize = pos
	if dataLen >= 0 && pos != dataLen {
		return fmt.Errorf("%w: tensors cover %d data bytes but the file holds %d", ErrFormat, pos, dataLen)
	}
	return nil
}

// encodeHeader builds the padded JSON header for tensors (whose offsets are
// already set) and returns it.
func encodeHeader(tensors []TensorInfo, metadata map[string]string) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	sep := func() {
		if !first {
			b.WriteByte(',')
		}
		first = false
	}
	if metadata != nil {
		sep()
		b.WriteString(`"__metadata__":`)
		// json.Marshal sorts map keys: deterministic output.
		js, err := json.Marshal(metadata)
		if err != nil {
			return nil, err
		}
		b.Write(js)
	}
	for _, t := range tensors {
		sep()
		name, _ := json.Marshal(t.Name)
		b.Write(name)
		shape := t.Shape
		if shape == nil {
			shape = []int64{}
		}
		e, err := json.Marshal(rawEntry{DType: t.DType, Shape: shape, DataOffsets: []int64{t.Begin, t.End}})
		if err != nil {
			return nil, err
		}
		b.WriteByte(':')
		b.Write(e)
	}
	b.WriteByte('}')
	for (8+b.Len())%8 != 0 {
		b.WriteByte(' ')
	}
	return b.Bytes(), nil
}
