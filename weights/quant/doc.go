// Package quant quantises weight matrices for serving: block-wise FP8
// (E4M3 elements, one FP32 scale per 128×128 block, DeepSeek-V3's
// "weight_scale_inv" layout that vLLM loads with quant_method "fp8") and
// OCP MXFP8 (E4M3 elements, one E8M0 power-of-two scale per 32 elements of
// a row, "weight_scale", vLLM's ModelOpt MXFP8 layout). The publisher
// quantises each version from the trainer's masters (publisher.quantize);
// engines dequantise on load, so what they serve is exactly code·scale.
// Symmetric group-wise INT4 (int4.go) serves quantised weights and fakes
// the same quantisation in the trainer's forward.
//
// # Contract
//
// Pure: standard library only, no I/O, no goroutines. Tensors travel as
// Tensor values (safetensors dtype spellings, little-endian bytes); the
// caller reads and writes files.
//
// Rounding is to nearest, ties to even, saturating: a scaled |value| ≥ 448
// (±Inf included) becomes ±448, NaN stays NaN (code 0x7f), and a block's
// scale comes from its largest finite |value| (an all-zero block gets
// scale 1 (FP8) or 2^−127 (MXFP8)).
//
// # Error bound (FP8, MXFP8)
//
// For a finite master x in a block of scale s, the served value x̂ obeys
//
//	|x̂ − x| ≤ 2^−4·|x| + 2^−10·s  (+ float32 rounding of x/s and q·s)
//
// because |x/s| ≤ 448 never saturates (the scale maps the block's amax to
// at most 448) and rounding to E4M3 is off by at most half an ulp: 2^−4
// relative for a normal value (3 mantissa bits), 2^−10 absolute in the
// subnormal range (step 2^−9). Stats.MaxRel is measured over the normal
// range only, so it is ≤ 2^−4; the tests assert the bound element-wise on
// random and adversarial tensors.
//
// # INT4
//
// int4.go is symmetric group-wise INT4 (engines.quantize int4_g32 /
// int4_g128, trainer.fake_quant): per group of 32 or 128 inputs of a row,
// scale = max(amax·(1/7), 1e-5) stored as BF16, q = round-half-even(w/s)
// in [−7, 7], packed as q+8 two per byte (element 2k in the low nibble),
// served BF16(q·scale) — THUDM/slime's Kimi INT4 QAT and vLLM's
// compressed-tensors uint4b8 (the file cites both). FakeQuantINT4 is
// quantise-then-dequantise, what a trainer's forward pass runs on.
package quant
