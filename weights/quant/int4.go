package quant

import (
	"errors"
	"fmt"
	"math"
)

// The INT4 format follows what Kimi-style INT4 RL serves (the code is ours):
//
//   - THUDM/slime slime/backends/megatron_utils/kernels/int4_qat/fake_int4_quant_cuda.cu
//     (symmetric branch): per [1 × group] block of a row, scale =
//     max(amax · (1/7), 1e-5) in float32 and q = rintf(w / scale), round
//     half to even, so |q| ≤ 7; the scale is then cast to the weights'
//     dtype (BF16).
//   - THUDM/slime slime/backends/megatron_utils/megatron_to_hf/processors/quantizer_compressed_tensors.py
//     (pack_layer, pack_to_int32): the BF16 scale becomes weight_scale; q
//     is stored as the unsigned nibble q + 8, eight per int32 with element
//     i of each eight at bits 4i. In little-endian bytes that is two per
//     byte, element 2k in the low nibble of byte k and 2k+1 in the high
//     one, which is how INT4.Packed stores a row.
//   - vllm-project/vllm vllm/model_executor/layers/quantization/compressed_tensors/schemes/compressed_tensors_wNa16.py:
//     WNA16_SUPPORTED_TYPES_MAP maps 4 bits to scalar_types.uint4b8
//     (stored = q + 8, q ∈ [−8, 7]); the kernel multiplies q by the BF16
//     scale into a BF16 weight and accumulates in float32.
const (
	// INT4Max is the largest |q| the quantiser produces (scale = amax/7).
	// −8 is representable but never produced, as in the sources.
	INT4Max = 7
	// INT4Bias is added to q to store it as an unsigned nibble (uint4b8).
	INT4Bias = 8
	// int4MinScale keeps an all-zero (or tiny) group's scale finite; every
	// element of such a group quantises to 0.
	int4MinScale = 1e-5
)

// ErrINT4 wraps every INT4 argument error (shape, group size, a
// non-finite weight).
var ErrINT4 = errors.New("quant: int4")

// INT4 is one weight matrix [Rows × Cols] quantised group-wise along its
// input dimension (Cols): row r's elements [g·GroupSize, (g+1)·GroupSize)
// share Scales[r·Groups+g]. A last group shorter than GroupSize (Cols not a
// multiple) has its own scale over the elements it has.
type INT4 struct {
	Rows, Cols, GroupSize int
	// Packed holds the values row by row, (Cols+1)/2 bytes a row: element
	// c of a row in byte c/2, the low nibble for even c, each nibble q + 8.
	// An odd row's last high nibble is 0 (padding, never read).
	Packed []byte
	// Scales are the BF16 scales as float32, Rows × Groups.
	Scales []float32
}

// INT4Groups is the number of groups a row of cols elements has.
func INT4Groups(cols, group int) int { return (cols + group - 1) / group }

// Groups is the number of scales per row.
func (q *INT4) Groups() int { return INT4Groups(q.Cols, q.GroupSize) }

func checkINT4(w []float32, rows, cols, group int) error {
	switch {
	case rows < 1 || cols < 1:
		return fmt.Errorf("%w: shape [%d × %d] must have rows and cols >= 1", ErrINT4, rows, cols)
	case group < 1:
		return fmt.Errorf("%w: group size must be >= 1, got %d", ErrINT4, group)
	case len(w) != rows*cols:
		return fmt.Errorf("%w: %d weights for shape [%d × %d]", ErrINT4, len(w), rows, cols)
	}
	for i, v := range w {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("%w: weight %d (row %d, col %d) is %v", ErrINT4, i, i/cols, i%cols, v)
		}
	}
	return nil
}

// int4BF16 rounds a finite f to the nearest BF16 (ties to even).
func int4BF16(f float32) float32 {
	b := math.Float32bits(f)
	b += 0x7fff + (b>>16)&1
	return math.Float32frombits(b &^ 0xffff)
}

// int4Group quantises one group in place of codes: it returns the BF16
// scale and writes each element's q.
func int4Group(w []float32, codes []int8) float32 {
	var amax float32
	for _, v := range w {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	s := max(amax*float32(1.0/INT4Max), int4MinScale)
	for i, v := range w {
		q := math.RoundToEven(float64(v / s))
		codes[i] = int8(min(max(q, -INT4Bias), INT4Max))
	}
	return int4BF16(s)
}

// int4Dequant is the weight a kernel multiplies by: q times the BF16 scale,
// rounded to BF16.
func int4Dequant(q int8, s float32) float32 { return int4BF16(float32(q) * s) }

// QuantizeINT4 quantises w ([rows × cols], row-major) with groups of group
// input elements. A NaN or infinite weight is an error: it would poison
// its group's scale.
func QuantizeINT4(w []float32, rows, cols, group int) (*INT4, error) {
	if err := checkINT4(w, rows, cols, group); err != nil {
		return nil, err
	}
	ng := INT4Groups(cols, group)
	stride := (cols + 1) / 2
	out := &INT4{Rows: rows, Cols: cols, GroupSize: group,
		Packed: make([]byte, rows*stride), Scales: make([]float32, rows*ng)}
	codes := make([]int8, cols)
	for r := range rows {
		row := w[r*cols : (r+1)*cols]
		for g := range ng {
			lo, hi := g*group, min((g+1)*group, cols)
			out.Scales[r*ng+g] = int4Group(row[lo:hi], codes[lo:hi])
		}
		pk := out.Packed[r*stride : (r+1)*stride]
		for c, q := range codes {
			pk[c/2] |= byte(q+INT4Bias) << (4 * (c % 2))
		}
	}
	return out, nil
}

// Value is q at (r, c), in [−8, 7].
func (q *INT4) Value(r, c int) int8 {
	b := q.Packed[r*((q.Cols+1)/2)+c/2]
	return int8((b>>(4*(c%2)))&0x0f) - INT4Bias
}

// Dequantize writes the served weights (q · scale, rounded to BF16) into
// dst, len Rows·Cols.
func (q *INT4) Dequantize(dst []float32) error {
	if len(dst) != q.Rows*q.Cols {
		return fmt.Errorf("%w: dequantize into %d floats, want %d", ErrINT4, len(dst), q.Rows*q.Cols)
	}
	ng := q.Groups()
	for r := range q.Rows {
		for c := range q.Cols {
			dst[r*q.Cols+c] = int4Dequant(q.Value(r, c), q.Scales[r*ng+c/q.GroupSize])
		}
	}
	return nil
}

// FakeQuantINT4 writes Dequantize(QuantizeINT4(w)) into dst without the
// packing (dst may be w itself): the weights an INT4 engine serves for w,
// in float32, for a trainer's forward pass. On error dst is unchanged.
func FakeQuantINT4(dst, w []float32, rows, cols, group int) error {
	if err := checkINT4(w, rows, cols, group); err != nil {
		return err
	}
	if len(dst) != len(w) {
		return fmt.Errorf("%w: fake-quantise into %d floats, want %d", ErrINT4, len(dst), len(w))
	}
	codes := make([]int8, min(group, cols))
	for r := range rows {
		for lo := 0; lo < cols; lo += group {
			hi := min(lo+group, cols)
			src := w[r*cols+lo : r*cols+hi]
			s := int4Group(src, codes[:hi-lo])
			out := dst[r*cols+lo : r*cols+hi]
			for i, q := range codes[:hi-lo] {
				out[i] = int4Dequant(q, s)
			}
		}
	}
	return nil
}
