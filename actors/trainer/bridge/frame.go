package bridge

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/fxamacker/cbor/v2"
)

// ProtocolVersion is the frames version this package speaks ("v").
const ProtocolVersion = 1

// MaxFrameBytes is the largest frame body (1 GiB); a larger length prefix
// is a protocol error.
const MaxFrameBytes = 1 << 30

// Frame errors. ReadFrame and DecodeFrame wrap exactly one of them.
var (
	// ErrFrameTooLarge: the length prefix exceeds the limit.
	ErrFrameTooLarge = errors.New("bridge: frame too large")
	// ErrTruncated: the stream ended inside a length prefix or a body.
	ErrTruncated = errors.New("bridge: truncated frame")
	// ErrBadFrame: the body is not one CBOR map with the frame header.
	ErrBadFrame = errors.New("bridge: bad frame")
	// ErrUnsupportedVersion: the frame's "v" is not ProtocolVersion.
	ErrUnsupportedVersion = errors.New("bridge: unsupported protocol version")
)

var (
	encMode = func() cbor.EncMode {
		em, err := cbor.EncOptions{Sort: cbor.SortCoreDeterministic}.EncMode()
		if err != nil {
			panic(err)
		}
		return em
	}()
	decMode = func() cbor.DecMode {
		dm, err := cbor.DecOptions{
			DupMapKey:        cbor.DupMapKeyEnforcedAPF,
			MaxNestedLevels:  16,
			MaxArrayElements: 1 << 26, // microbatch plans and group lists of long batches
			MaxMapPairs:      1 << 16,
			UTF8:             cbor.UTF8RejectInvalid,
			// A CBOR map decoded into `any` has text keys in this protocol.
			DefaultMapType: mapType,
		}.DecMode()
		if err != nil {
			panic(err)
		}
		return dm
	}()
)

// Header is every frame's common part.
type Header struct {
	V    int    `cbor:"v"`
	Type string `cbor:"type"`
	ID   uint64 `cbor:"id"`
}

func (h *Header) header() *Header { return h }

// frame is implemented by every frame struct (through its Header).
type frame interface{ header() *Header }

// EncodeFrame encodes v (a frame struct or map) as a frame body.
func EncodeFrame(v any) ([]byte, error) {
	b, err := encMode.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: encode: %v", ErrBadFrame, err)
	}
	if len(b) > MaxFrameBytes {
		return nil, fmt.Errorf("%w: %d bytes (limit %d)", ErrFrameTooLarge, len(b), MaxFrameBytes)
	}
	return b, nil
}

// WriteFrame writes body with its length prefix in one write.
func WriteFrame(w io.Writer, body []byte) error {
	if len(body) > MaxFrameBytes {
		return fmt.Errorf("%w: %d bytes (limit %d)", ErrFrameTooLarge, len(body), MaxFrameBytes)
	}
	buf := make([]byte, 4+len(body))
	binary.LittleEndian.PutUint32(buf, uint32(len(body)))
	copy(buf[4:], body)
	_, err := w.Write(buf)
	return err
}

// ReadFrame reads one frame body of at most limit bytes (0: MaxFrameBytes).
// A stream that ends cleanly before a frame returns io.EOF; one that ends
// inside a frame ErrTruncated. The body is read as it arrives, so a bogus
// length prefix does not allocate its size up front.
func ReadFrame(r io.Reader, limit int) ([]byte, error) {
	if limit <= 0 || limit > MaxFrameBytes {
		limit = MaxFrameBytes
	}
	var pre [4]byte
	if n, err := io.ReadFull(r, pre[:]); err != nil {
		if err == io.EOF && n == 0 {
			return nil, io.EOF
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: %d of 4 length bytes", ErrTruncated, n)
		}
		return nil, err
	}
	n := binary.LittleEndian.Uint32(pre[:])
	if uint64(n) > uint64(limit) {
		return nil, fmt.Errorf("%w: length %d (limit %d)", ErrFrameTooLarge, n, limit)
	}
	const chunk = 1 << 20
	body := make([]byte, 0, min(int(n), chunk))
	for len(body) < int(n) {
		want := min(int(n)-len(body), chunk)
		body = append(body, make([]byte, want)...)
		got, err := io.ReadFull(r, body[len(body)-want:])
		if err != nil {
			if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, fmt.Errorf("%w: %d of %d body bytes", ErrTruncated, len(body)-want+got, n)
			}
			return nil, err
		}
	}
	return body, nil
}

// DecodeHeader decodes the header of a frame body: the body must be a CBOR
// map with an int "v", a text "type" and a uint "id" (0 when absent); a
// "v" other than ProtocolVersion is ErrUnsupportedVersion (the header is
// still returned, so the Error reply can carry the id).
func DecodeHeader(body []byte) (Header, error) {
	var raw map[string]cbor.RawMessage
	if err := decMode.Unmarshal(body, &raw); err != nil {
		return Header{}, fmt.Errorf("%w: %v", ErrBadFrame, err)
	}
	var h Header
	if err := decMode.Unmarshal(body, &h); err != nil {
		return Header{}, fmt.Errorf("%w: header: %v", ErrBadFrame, err)
	}
	if _, ok := raw["v"]; !ok {
		return h, fmt.Errorf("%w: no \"v\"", ErrBadFrame)
	}
	if h.Type == "" {
		return h, fmt.Errorf("%w: no \"type\"", ErrBadFrame)
	}
	if h.V != ProtocolVersion {
		return h, fmt.Errorf("%w: v %d (this side speaks %d)", ErrUnsupportedVersion, h.V, ProtocolVersion)
	}
	return h, nil
}

// DecodeFrame decodes a frame body into v (a frame struct); keys v does not
// name are ignored.
func DecodeFrame(body []byte, v any) error {
	if err := decMode.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%w: %v", ErrBadFrame, err)
	}
	return nil
}

// decodeStrict decodes body into v and names the first key not in allowed.
func decodeStrict(body []byte, v any, allowed ...string) (field string, err error) {
	var raw map[string]cbor.RawMessage
	if err := decMode.Unmarshal(body, &raw); err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadFrame, err)
	}
	for k := range raw {
		if !contains(allowed, k) {
			return k, fmt.Errorf("unknown key %q", k)
		}
	}
	if err := decMode.Unmarshal(body, v); err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadFrame, err)
	}
	return "", nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Tensor is an array inside a frame: little-endian, C order,
// len(Data) == prod(Shape)·itemsize.
type Tensor struct {
	DType string  `cbor:"dtype"`
	Shape []int64 `cbor:"shape"`
	Data  []byte  `cbor:"data"`
}

// Tensor dtypes.
const (
	Int32   = "int32"
	Int64   = "int64"
	Uint8   = "uint8"
	Float32 = "float32"
)

func itemSize(dtype string) int {
	switch dtype {
	case Int32, Float32:
		return 4
	case Int64:
		return 8
	case Uint8:
		return 1
	}
	return 0
}

// Int32Tensor, Int64Tensor, Uint8Tensor and Float32Tensor build 1-D tensors.
func Int32Tensor(v []int32) Tensor {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return Tensor{DType: Int32, Shape: []int64{int64(len(v))}, Data: b}
}

// Int64Tensor builds a 1-D int64 tensor.
func Int64Tensor(v []int64) Tensor {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
	}
	return Tensor{DType: Int64, Shape: []int64{int64(len(v))}, Data: b}
}

// Uint8Tensor builds a 1-D uint8 tensor.
func Uint8Tensor(v []uint8) Tensor {
	return Tensor{DType: Uint8, Shape: []int64{int64(len(v))}, Data: append([]byte(nil), v...)}
}

// Float32Tensor builds a 1-D float32 tensor.
func Float32Tensor(v []float32) Tensor {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return Tensor{DType: Float32, Shape: []int64{int64(len(v))}, Data: b}
}

// Check verifies t is a 1-D tensor of dtype with n elements (n < 0: any)
// whose data length agrees with its shape.
func (t Tensor) Check(dtype string, n int) error {
	if t.DType != dtype {
		return fmt.Errorf("dtype %q, want %q", t.DType, dtype)
	}
	if len(t.Shape) != 1 {
		return fmt.Errorf("shape %v, want 1-D", t.Shape)
	}
	if t.Shape[0] < 0 || (n >= 0 && t.Shape[0] != int64(n)) {
		return fmt.Errorf("shape %v, want [%d]", t.Shape, n)
	}
	if int64(len(t.Data)) != t.Shape[0]*int64(itemSize(dtype)) {
		return fmt.Errorf("%d data bytes for shape %v of %s", len(t.Data), t.Shape, dtype)
	}
	return nil
}

// Int32s decodes an int32 tensor checked with Check.
func (t Tensor) Int32s() []int32 {
	out := make([]int32, len(t.Data)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return out
}

// Int64s decodes an int64 tensor checked with Check.
func (t Tensor) Int64s() []int64 {
	out := make([]int64, len(t.Data)/8)
	for i := range out {
		out[i] = int64(binary.LittleEndian.Uint64(t.Data[8*i:]))
	}
	return out
}

// Float32s decodes a float32 tensor checked with Check.
func (t Tensor) Float32s() []float32 {
	out := make([]float32, len(t.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return out
}
