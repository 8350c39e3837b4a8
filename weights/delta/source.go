package delta

import (
	"fmt"
	"slices"

	"github.com/asyncrl/asyncrl/weights/safetensors"
)

// Source is a checkpoint read one tensor at a time. ReadTensor must be safe
// for concurrent use. *safetensors.Checkpoint (a directory, single file or
// sharded) implements it, reading each tensor from disk on demand.
type Source interface {
	// Names returns every tensor name, sorted.
	Names() []string
	// ReadTensor returns one tensor's bytes and description.
	ReadTensor(name string) ([]byte, safetensors.TensorInfo, error)
}

var _ Source = (*safetensors.Checkpoint)(nil)

// MemSource is a checkpoint held in memory (a trainer's own weights).
type MemSource struct {
	byName map[string]safetensors.Tensor
	names  []string
}

var _ Source = (*MemSource)(nil)

// NewMemSource indexes tensors; the data is not copied, so the caller must
// not modify it while the source is in use.
func NewMemSource(tensors []safetensors.Tensor) (*MemSource, error) {
	m := &MemSource{byName: make(map[string]safetensors.Tensor, len(tensors))}
	for _, t := range tensors {
		if _, dup := m.byName[t.Name]; dup {
			return nil, fmt.Errorf("%w: tensor %q twice", ErrMismatch, t.Name)
		}
		if !t.DType.Valid() {
			return nil, fmt.Errorf("%w: tensor %q: unknown dtype %q", ErrMismatch, t.Name, t.DType)
		}
		info := safetensors.TensorInfo{Name: t.Name, DType: t.DType, Shape: t.Shape}
		if n := info.NumElements() * int64(t.DType.Size()); n != int64(len(t.Data)) {
			return nil, fmt.Errorf("%w: tensor %q: %d bytes for %s%v (want %d)", ErrMismatch, t.Name, len(t.Data), t.DType, t.Shape, n)
		}
		m.byName[t.Name] = t
		m.names = append(m.names, t.Name)
	}
	slices.Sort(m.names)
	return m, nil
}

// Names implements Source.
func (m *MemSource) Names() []string { return m.names }

// ReadTensor implements Source; it returns the caller's slice, not a copy.
func (m *MemSource) ReadTensor(name string) ([]byte, safetensors.TensorInfo, error) {
	t, ok := m.byName[name]
	if !ok {
		return nil, safetensors.TensorInfo{}, fmt.Errorf("%w: %q", safetensors.ErrNotFound, name)
	}
	return t.Data, safetensors.TensorInfo{Name: t.Name, DType: t.DType, Shape: t.Shape, End: int64(len(t.Data))}, nil
}

// castTo converts b (dtype from) into dtype to; the floating types convert
// through float32 (round to nearest even), others must already match.
func castTo(b []byte, from, to safetensors.DType) ([]byte, error) {
	if from == to {
		return b, nil
	}
	isFloat := func(d safetensors.DType) bool {
		return d == safetensors.F32 || d == safetensors.BF16 || d == safetensors.F16
	}
	if !isFloat(from) || !isFloat(to) {
		return nil, fmt.Errorf("cannot cast %s to %s", from, to)
	}
	f, err := safetensors.DecodeFloat32(from, b, nil)
	if err != nil {
		return nil, err
	}
	switch to {
	case safetensors.BF16:
		return safetensors.EncodeBF16(f), nil
	case safetensors.F16:
		return safetensors.EncodeF16(f), nil
	default:
		return safetensors.EncodeF32(f), nil
	}
}
