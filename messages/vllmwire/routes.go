package vllmwire

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
)

// ErrMalformed wraps every decoding error of this package.
var ErrMalformed = errors.New("vllmwire: malformed")

// Shape limits: far above any real model, low enough that the size
// arithmetic on hostile shapes cannot overflow.
const (
	MaxLayers = 1 << 12
	MaxTopK   = 1 << 10
	maxValues = 1 << 34
)

// RoutedExperts is one choice's routed_experts value as it crosses HTTP:
// expert ids in C order [Shape[0] tokens, Shape[1] layers, Shape[2] top_k],
// little-endian values of DType. It marshals to vLLM's form — a JSON
// string, base64 of the array saved with np.save (.npy) — and unmarshals
// from that or from the {"data": base64 raw bytes, "shape": [T, L, K],
// "dtype": "…"} object other producers (SGLang-style, Dynamo's
// engine_data) use. JSON null leaves it zero (use a pointer field).
type RoutedExperts struct {
	// DType is "uint8", "uint16", "int16", "int32" or "int64".
	DType string
	Shape [3]int
	Data  []byte
}

// dtypeSize is the element width of a wire dtype (0 when unknown).
func dtypeSize(d string) int {
	switch d {
	case "uint8":
		return 1
	case "uint16", "int16":
		return 2
	case "int32":
		return 4
	case "int64":
		return 8
	}
	return 0
}

// WireDTypeFor is the dtype vLLM sends routes of numExperts experts in:
// the smallest of uint8, uint16, int32 that holds every id
// (vllm/entrypoints/openai/completion/protocol.py, CompletionResponseChoice.routed_experts:
// "dtype uint8/uint16/int32").
func WireDTypeFor(numExperts int32) string {
	switch {
	case numExperts <= 1<<8:
		return "uint8"
	case numExperts <= 1<<16:
		return "uint16"
	default:
		return "int32"
	}
}

// Rows are decoded routes: Values is C-order [Tokens, Layers, TopK].
type Rows struct {
	Tokens, Layers, TopK int
	Values               []int32
}

// Stride is Layers·TopK, the values per token.
func (r Rows) Stride() int { return r.Layers * r.TopK }

// EncodeRoutedExperts packs rows (C-order [T, L, K] expert ids, each in
// [0, numExperts)) into the wire object in WireDTypeFor(numExperts).
func EncodeRoutedExperts(rows []int32, T, L, K int, numExperts int32) (RoutedExperts, error) {
	if err := checkShape(T, L, K); err != nil {
		return RoutedExperts{}, err
	}
	if numExperts <= 0 {
		return RoutedExperts{}, fmt.Errorf("vllmwire: num_experts %d: want > 0", numExperts)
	}
	if len(rows) != T*L*K {
		return RoutedExperts{}, fmt.Errorf("vllmwire: %d route values for shape [%d, %d, %d]", len(rows), T, L, K)
	}
	dt := WireDTypeFor(numExperts)
	size := dtypeSize(dt)
	data := make([]byte, len(rows)*size)
	for i, v := range rows {
		if v < 0 || v >= numExperts {
			return RoutedExperts{}, fmt.Errorf("vllmwire: route value %d at %d outside [0, %d)", v, i, numExperts)
		}
		switch size {
		case 1:
			data[i] = uint8(v)
		case 2:
			binary.LittleEndian.PutUint16(data[2*i:], uint16(v))
		default:
			binary.LittleEndian.PutUint32(data[4*i:], uint32(v))
		}
	}
	return RoutedExperts{DType: dt, Shape: [3]int{T, L, K}, Data: data}, nil
}

func checkShape(T, L, K int) error {
	switch {
	case T < 0 || T > maxValues:
		return fmt.Errorf("%w: routed_experts tokens %d", ErrMalformed, T)
	case L <= 0 || L > MaxLayers:
		return fmt.Errorf("%w: routed_experts layers %d: want 1..%d", ErrMalformed, L, MaxLayers)
	case K <= 0 || K > MaxTopK:
		return fmt.Errorf("%w: routed_experts top_k %d: want 1..%d", ErrMalformed, K, MaxTopK)
	case int64(T)*int64(L)*int64(K) > maxValues:
		return fmt.Errorf("%w: routed_experts shape [%d, %d, %d] too large", ErrMalformed, T, L, K)
	}
	return nil
}

// check verifies shape, dtype and data length agree.
func (r RoutedExperts) check() error {
	size := dtypeSize(r.DType)
	if size == 0 {
		return fmt.Errorf("%w: routed_experts dtype %q: want uint8, uint16, int16, int32 or int64", ErrMalformed, r.DType)
	}
	if err := checkShape(r.Shape[0], r.Shape[1], r.Shape[2]); err != nil {
		return err
	}
	if want := int64(r.Shape[0]) * int64(r.Shape[1]) * int64(r.Shape[2]) * int64(size); int64(len(r.Data)) != want {
		return fmt.Errorf("%w: routed_experts: %d data bytes, shape %v of %s wants %d", ErrMalformed, len(r.Data), r.Shape, r.DType, want)
	}
	return nil
}

// DecodeRoutedExperts checks the wire object and widens it to int32 rows:
// shape, dtype and byte length must agree, every id must lie in
// [0, numExperts), and when layers/topK are > 0 the shape must have them.
// It allocates only the output (at most 4 bytes per input byte).
func DecodeRoutedExperts(r RoutedExperts, numExperts int32, layers, topK int) (Rows, error) {
	if err := r.check(); err != nil {
		return Rows{}, err
	}
	if (layers > 0 && r.Shape[1] != layers) || (topK > 0 && r.Shape[2] != topK) {
		return Rows{}, fmt.Errorf("%w: routed_experts shape %v: want [tokens, %d, %d]", ErrMalformed, r.Shape, layers, topK)
	}
	if numExperts <= 0 {
		return Rows{}, fmt.Errorf("vllmwire: num_experts %d: want > 0", numExperts)
	}
	n := r.Shape[0] * r.Shape[1] * r.Shape[2]
	out := make([]int32, n)
	d := r.Data
	hi := int64(numExperts)
	for i := range out {
		var v int64
		switch r.DType {
		case "uint8":
			v = int64(d[i])
		case "uint16":
			v = int64(binary.LittleEndian.Uint16(d[2*i:]))
		case "int16":
			v = int64(int16(binary.LittleEndian.Uint16(d[2*i:])))
		case "int32":
			v = int64(int32(binary.LittleEndian.Uint32(d[4*i:])))
		default:
			v = int64(binary.LittleEndian.Uint64(d[8*i:]))
		}
		if v < 0 || v >= hi {
			t, rest := i/(r.Shape[1]*r.Shape[2]), i%(r.Shape[1]*r.Shape[2])
			return Rows{}, fmt.Errorf("%w: routed_experts[%d][%d][%d]=%d outside [0, %d)", ErrMalformed, t, rest/r.Shape[2], rest%r.Shape[2], v, numExperts)
		}
		out[i] = int32(v)
	}
	return Rows{Tokens: r.Shape[0], Layers: r.Shape[1], TopK: r.Shape[2], Values: out}, nil
}

// NPY is the array as np.save writes it (what vLLM base64-encodes).
func (r RoutedExperts) NPY() []byte { return encodeNPY(r.DType, r.Shape[:], r.Data) }

// ParseNPY reads a .npy array of shape [T, L, K] into the wire object
// (Data aliases b).
func ParseNPY(b []byte) (RoutedExperts, error) {
	dt, shape, data, err := decodeNPY(b)
	if err != nil {
		return RoutedExperts{}, err
	}
	if len(shape) != 3 {
		return RoutedExperts{}, fmt.Errorf("%w: routed_experts .npy shape %v: want 3 dims [tokens, layers, top_k]", ErrMalformed, shape)
	}
	r := RoutedExperts{DType: dt, Shape: [3]int{shape[0], shape[1], shape[2]}, Data: data}
	return r, r.check()
}

// MarshalJSON writes vLLM's form: a string, base64 (standard, padded) of
// the .npy bytes.
func (r RoutedExperts) MarshalJSON() ([]byte, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	npy := r.NPY()
	out := make([]byte, 0, base64.StdEncoding.EncodedLen(len(npy))+2)
	out = append(out, '"')
	out = base64.StdEncoding.AppendEncode(out, npy)
	return append(out, '"'), nil
}

// objectForm is the {"data", "shape", "dtype"} form.
type objectForm struct {
	Data  *string `json:"data"`
	Shape []int   `json:"shape"`
	DType string  `json:"dtype"`
}

// UnmarshalJSON reads vLLM's base64 .npy string or the object form.
func (r *RoutedExperts) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		return nil
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("%w: routed_experts: %w", ErrMalformed, err)
		}
		raw, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return fmt.Errorf("%w: routed_experts: base64: %w", ErrMalformed, err)
		}
		v, err := ParseNPY(raw)
		if err != nil {
			return err
		}
		*r = v
		return nil
	case len(b) > 0 && b[0] == '{':
		var o objectForm
		if err := json.Unmarshal(b, &o); err != nil {
			return fmt.Errorf("%w: routed_experts: %w", ErrMalformed, err)
		}
		if o.Data == nil || len(o.Shape) != 3 {
			return fmt.Errorf("%w: routed_experts object needs data and a 3-dim shape, got shape %v", ErrMalformed, o.Shape)
		}
		raw, err := base64.StdEncoding.DecodeString(*o.Data)
		if err != nil {
			return fmt.Errorf("%w: routed_experts.data: base64: %w", ErrMalformed, err)
		}
		v := RoutedExperts{DType: o.DType, Shape: [3]int{o.Shape[0], o.Shape[1], o.Shape[2]}, Data: raw}
		if err := v.check(); err != nil {
			return err
		}
		*r = v
		return nil
	}
	return fmt.Errorf("%w: routed_experts: want a base64 .npy string or a {data, shape, dtype} object", ErrMalformed)
}

// DecodeSGLangRoutes reads SGLang's routed experts: meta_info
// ["routed_experts"] of /generate with return_routed_experts, base64 of the
// raw int32 tensor bytes without a shape
// (sgl-project/sglang python/sglang/srt/managers/tokenizer_manager.py:
// pybase64.b64encode(routed_experts_tensor.numpy().tobytes())), rows
// [routed_experts_start_len, …) of layers × topK ids each.
func DecodeSGLangRoutes(s string, numExperts int32, layers, topK int) (Rows, error) {
	if err := checkShape(0, layers, topK); err != nil {
		return Rows{}, err
	}
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return Rows{}, fmt.Errorf("%w: routed_experts: base64: %w", ErrMalformed, err)
	}
	row := 4 * layers * topK
	if len(raw)%row != 0 {
		return Rows{}, fmt.Errorf("%w: routed_experts: %d bytes is not a whole number of %d-byte rows (int32 × %d layers × top-%d)", ErrMalformed, len(raw), row, layers, topK)
	}
	return DecodeRoutedExperts(RoutedExperts{DType: "int32", Shape: [3]int{len(raw) / row, layers, topK}, Data: raw}, numExperts, layers, topK)
}
