package quant

import (
	"encoding/binary"
	"fmt"
	"math"
)

// FP8Block is block-wise FP8: E4M3 elements with one FP32 scale per
// BlockRows×BlockCols block (DeepSeek-V3's and Qwen FP8's 128×128),
// scale = amax/448 so the block's largest finite |w| maps to E4M3's
// largest value. The scale is stored as "<weight>_scale_inv", F32, shape
// [⌈rows/BlockRows⌉, ⌈cols/BlockCols⌉], and dequantisation multiplies by
// it — DeepSeek's name, which vLLM keeps: Fp8LinearMethod.create_weights
// registers "weight_scale_inv" of that shape when quantization_config has
// weight_block_size (vllm-project/vllm,
// vllm/model_executor/layers/quantization/fp8.py), and config.json says
// {"quant_method": "fp8", "weight_block_size": [128, 128]}.
type FP8Block struct{ BlockRows, BlockCols int }

var _ Scheme = FP8Block{}

// Name implements Scheme.
func (FP8Block) Name() string { return "fp8" }

// ScaleName implements Scheme.
func (FP8Block) ScaleName(weight string) string { return weight + "_scale_inv" }

// QuantizationConfig implements Scheme (vLLM's Fp8Config.from_config keys).
func (b FP8Block) QuantizationConfig(unquantised []string) map[string]any {
	return map[string]any{
		"quant_method":      "fp8",
		"fmt":               "e4m3",
		"activation_scheme": "dynamic",
		"weight_block_size": []int{b.BlockRows, b.BlockCols},
		"ignored_layers":    nonNil(unquantised),
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// fp8Scale: amax/448, and 1 for an all-zero block (any scale decodes
// zeros to zero). A block so small that amax/448 would be a float32
// subnormal gets the smallest normal, 2^−126, instead: its 1/s would
// overflow float32, and the block's values still round within the bound
// for the scale actually stored.
func fp8Scale(amax float32) (s, inv float32) {
	switch {
	case amax == 0:
		return 1, 1
	case amax < E4M3Max*0x1p-126:
		return 0x1p-126, 0x1p126
	}
	return amax / E4M3Max, E4M3Max / amax
}

func (b FP8Block) grid(rows, cols int) (nbi, nbj int) {
	return (rows + b.BlockRows - 1) / b.BlockRows, (cols + b.BlockCols - 1) / b.BlockCols
}

// Quantize implements Scheme.
func (b FP8Block) Quantize(name string, rows, cols int, w []float32) (Tensor, Tensor, Stats, error) {
	if b.BlockRows < 1 || b.BlockCols < 1 {
		return Tensor{}, Tensor{}, Stats{}, fmt.Errorf("%w: fp8 block %d×%d", ErrFormat, b.BlockRows, b.BlockCols)
	}
	if rows < 0 || cols < 0 || len(w) != rows*cols {
		return Tensor{}, Tensor{}, Stats{}, fmt.Errorf("%w: tensor %q: %d values for %d×%d", ErrFormat, name, len(w), rows, cols)
	}
	nbi, nbj := b.grid(rows, cols)
	q := make([]uint8, rows*cols)
	scales := make([]float32, nbi*nbj)
	st := quantizeGrid(q, scales, w, rows, cols, b.BlockRows, b.BlockCols, fp8Scale)
	sb := make([]byte, 4*len(scales))
	for i, s := range scales {
		binary.LittleEndian.PutUint32(sb[4*i:], math.Float32bits(s))
	}
	weight := Tensor{Name: name, DType: "F8_E4M3", Shape: []int64{int64(rows), int64(cols)}, Data: q}
	scale := Tensor{Name: b.ScaleName(name), DType: "F32", Shape: []int64{int64(nbi), int64(nbj)}, Data: sb}
	return weight, scale, st, nil
}

// Dequantize implements Scheme.
func (b FP8Block) Dequantize(weight, scale Tensor, out []float32) ([]float32, error) {
	rows, cols, err := matrixShape(weight, "F8_E4M3", 1)
	if err != nil {
		return nil, err
	}
	nbi, nbj := b.grid(rows, cols)
	if _, _, err := matrixShape(scale, "F32", 4); err != nil {
		return nil, err
	}
	if err := checkScaleShape(scale, []int64{int64(nbi), int64(nbj)}); err != nil {
		return nil, err
	}
	scales := make([]float32, nbi*nbj)
	for i := range scales {
		scales[i] = math.Float32frombits(binary.LittleEndian.Uint32(scale.Data[4*i:]))
	}
	out = grow(out, rows*cols)
	dequantizeGrid(out, weight.Data, scales, rows, cols, b.BlockRows, b.BlockCols)
	return out, nil
}
