package quant

import "math"

// E4M3Max is the largest finite E4M3 "fn" value (S.1111.110 = 1.75·2^8).
const E4M3Max = 448

// e4m3NaN is the code EncodeE4M3 gives NaN (S.1111.111; E4M3 "fn" has no
// infinities).
const e4m3NaN = 0x7f

// e4m3Table widens every E4M3 code exactly (bias 7, subnormals m/8·2^−6,
// 0x7f and 0xff NaN), so decoding is one load.
var e4m3Table = func() (t [256]float32) {
	for b := range t {
		exp, man := (b>>3)&0xf, float64(b&7)
		var v float64
		switch {
		case exp == 0xf && man == 7:
			v = math.NaN()
		case exp == 0:
			v = man / 8 * math.Ldexp(1, -6)
		default:
			v = (1 + man/8) * math.Ldexp(1, exp-7)
		}
		if b&0x80 != 0 {
			v = -v
		}
		t[b] = float32(v)
	}
	return t
}()

// DecodeE4M3 widens an E4M3 "fn" code (torch.float8_e4m3fn) exactly.
func DecodeE4M3(b uint8) float32 { return e4m3Table[b] }

// EncodeE4M3 rounds y to the nearest E4M3 "fn" value, ties to even, and
// saturates: |y| ≥ 448 (±Inf included) gives ±448, NaN gives NaN (0x7f
// with y's sign). This is torch's y.clamp(-448, 448).to(float8_e4m3fn)
// for finite y, the "satfinite" conversion of CUDA's __nv_cvt_float_to_fp8.
func EncodeE4M3(y float32) uint8 {
	if b := math.Float32bits(y); b&0x7fffffff > 0x7f800000 { // NaN
		return uint8(b>>24)&0x80 | e4m3NaN
	}
	return encodeNotNaN(y)
}

// encodeNotNaN is EncodeE4M3 for y that is not NaN, small enough for the
// compiler to inline into the quantiser's loop.
func encodeNotNaN(y float32) uint8 {
	b := math.Float32bits(y)
	abs := b & 0x7fffffff
	var c uint32
	if abs >= 0x3c800000 { // ≥ 2^−6: normal
		// Saturate at 448 (±Inf included), then round the 23-bit
		// mantissa to 3 bits, to nearest even; a carry moves into the
		// exponent, which is what rounding up does. Rebias the exponent
		// from 127 to 7: the code is the top 12 bits minus 120<<3. Nothing
		// below 448 rounds past 448 (1.75·2^8).
		v := min(abs, 0x43e00000)
		v += 0x7ffff + (v>>20)&1
		c = v>>20 - 120<<3
	} else {
		// Subnormal: the code is m = round(|y|·2^9), 0…8 (8 is 0x08,
		// the smallest normal 2^−6). Adding 2^14, whose float32 ulp is
		// 2^−9, makes the FPU round |y| to that step, ties to even; the
		// low bits of the sum are m.
		c = math.Float32bits(math.Float32frombits(abs)+0x1p14) - 0x46800000
	}
	return uint8(b>>24)&0x80 | uint8(c)
}
