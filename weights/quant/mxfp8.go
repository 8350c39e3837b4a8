package quant

import (
	"fmt"
	"math"
)

// MXBlock is the MX block size: 32 consecutive elements along the last
// dimension share one scale (OCP Microscaling Formats v1.0).
const MXBlock = 32

// MXFP8 is OCP MXFP8 with E4M3 elements: each run of 32 elements of a row
// shares a power-of-two scale stored as an E8M0 byte (2^(b−127); 255 is
// NaN), as "<weight>_scale", shape [rows, ⌈cols/32⌉] — vLLM's ModelOpt
// MXFP8 layout (ModelOptMxFp8LinearMethod.create_weights registers
// "weight_scale" [N, K/32] next to the float8_e4m3fn "weight";
// dequant_mxfp8_to_bf16 multiplies by exp2(scale − 127); vllm-project/vllm,
// vllm/model_executor/layers/quantization/utils/mxfp8_utils.py).
//
// The scale bytes are written as safetensors U8, not F8_E8M0: vLLM's
// ModelOpt MXFP8 parameter is uint8 (MXFP8_SCALE_DTYPE = torch.uint8,
// mxfp8_utils.py at 00134422a11df1b8427b29a36bdf22b697626b32) and its
// loaders copy with Tensor.copy_ (vllm/model_executor/parameter.py at
// 0045689bdb239a1c53951f3847b9475098f36ef7, _assert_and_load), which casts
// by value — an F8_E8M0 tensor (torch.float8_e8m0fnu, 2^(b−127)) would land
// as 0 or 1, not as its exponent byte. ModelOpt's own export stores the
// scale as uint8 too (NVIDIA/Model-Optimizer
// modelopt/torch/quantization/qtensor/mxfp8_tensor.py at
// a8d544b397d7eedba3952a5c8b9cd93f9e310b3c, MXFP8QTensor.SCALE_DTYPE).
// Dequantize takes either dtype (the bytes mean the same).
//
// The exponent is chosen so the block's amax lands at or below 448:
// 2^⌈log2(amax/448)⌉, as TransformerEngine's MXFP8 quantiser rounds the
// scale up. The OCP spec's 2^(⌊log2 amax⌋−8) maps amax into [256, 512)
// and clamps everything above 448, up to 12.5 % off; both decode the same
// way, so any MXFP8 reader serves these checkpoints.
type MXFP8 struct{}

var _ Scheme = MXFP8{}

// Name implements Scheme.
func (MXFP8) Name() string { return "mxfp8" }

// ScaleName implements Scheme.
func (MXFP8) ScaleName(weight string) string { return weight + "_scale" }

// QuantizationConfig implements Scheme: ModelOpt's config.json form,
// which vLLM maps to its modelopt_mxfp8 method
// (ModelOptMxFp8Config.override_quantization_method looks for "MXFP8" in
// quant_algo). In this flat form (no nested "quantization" object, which
// is hf_quant_config.json's) vLLM reads the unquantised modules from
// "ignore", not "exclude_modules" (ModelOptQuantConfigBase.from_config,
// vllm/model_executor/layers/quantization/modelopt.py at
// 00155cdecca722d98e34234c3d172725b7720b7d); a module missing there is
// quantised — ParallelLMHead included — and then finds BF16 bytes.
func (MXFP8) QuantizationConfig(unquantised []string) map[string]any {
	return map[string]any{
		"quant_method":        "modelopt",
		"quant_algo":          "MXFP8",
		"kv_cache_quant_algo": nil,
		"ignore":              nonNil(unquantised),
	}
}

// DecodeE8M0 widens an E8M0 scale byte: 2^(b−127), NaN for 255.
func DecodeE8M0(b uint8) float32 {
	if b == 0xff {
		return float32(math.NaN())
	}
	return float32(math.Ldexp(1, int(b)-127))
}

// mxExponent is the unbiased E8M0 exponent E of the smallest power of two
// with amax/2^E ≤ 448, clamped to E8M0's finite range [−127, 127]. It
// reads E off the bits of r = amax/448 in float64 (exact enough that r is
// a power of two exactly when its mantissa bits are zero): r's exponent,
// plus one unless r is a power of two.
func mxExponent(amax float32) int {
	if amax == 0 {
		return -127
	}
	r := math.Float64bits(float64(amax) / E4M3Max) // normal: amax ≥ 2^−149
	e := int(r>>52&0x7ff) - 1023
	if r&(1<<52-1) != 0 {
		e++
	}
	return min(max(e, -127), 127)
}

func mxScale(amax float32) (s, inv float32) {
	e := mxExponent(amax)
	if e > -127 && e < 127 { // both 2^e and 2^−e are normal float32
		return math.Float32frombits(uint32(e+127) << 23), math.Float32frombits(uint32(127-e) << 23)
	}
	return float32(math.Ldexp(1, e)), float32(math.Ldexp(1, -e))
}

// Quantize implements Scheme.
func (m MXFP8) Quantize(name string, rows, cols int, w []float32) (Tensor, Tensor, Stats, error) {
	if rows < 0 || cols < 0 || len(w) != rows*cols {
		return Tensor{}, Tensor{}, Stats{}, fmt.Errorf("%w: tensor %q: %d values for %d×%d", ErrFormat, name, len(w), rows, cols)
	}
	nbj := (cols + MXBlock - 1) / MXBlock
	q := make([]uint8, rows*cols)
	scales := make([]float32, rows*nbj)
	st := quantizeGrid(q, scales, w, rows, cols, 1, MXBlock, mxScale)
	sb := make([]byte, len(scales))
	for i, s := range scales {
		// s = 2^E: its float32 exponent field is E+127 (and 0 for the
		// subnormal 2^−127), which is the E8M0 byte.
		sb[i] = uint8(math.Float32bits(s) >> 23)
	}
	weight := Tensor{Name: name, DType: "F8_E4M3", Shape: []int64{int64(rows), int64(cols)}, Data: q}
	scale := Tensor{Name: m.ScaleName(name), DType: "U8", Shape: []int64{int64(rows), int64(nbj)}, Data: sb}
	return weight, scale, st, nil
}

// Dequantize implements Scheme.
func (MXFP8) Dequantize(weight, scale Tensor, out []float32) ([]float32, error) {
	rows, cols, err := matrixShape(weight, "F8_E4M3", 1)
	if err != nil {
		return nil, err
	}
	dt := scale.DType
	if dt == "U8" {
		dt = "F8_E8M0"
		scale.DType = dt
	}
	if _, _, err := matrixShape(scale, "F8_E8M0", 1); err != nil {
		return nil, err
	}
	nbj := (cols + MXBlock - 1) / MXBlock
	if err := checkScaleShape(scale, []int64{int64(rows), int64(nbj)}); err != nil {
		return nil, err
	}
	scales := make([]float32, len(scale.Data))
	for i, b := range scale.Data {
		scales[i] = DecodeE8M0(b)
	}
	out = grow(out, rows*cols)
	dequantizeGrid(out, weight.Data, scales, rows, cols, 1, MXBlock)
	return out, nil
}
