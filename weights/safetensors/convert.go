package safetensors

import (
	"encoding/binary"
	"fmt"
	"math"
)

// BF16FromFloat32 rounds f to bfloat16, to nearest with ties to even, as
// PyTorch does. NaN stays NaN (quiet); ±Inf and overflow to ±Inf behave as
// IEEE rounding says.
func BF16FromFloat32(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN
		return uint16(b>>16) | 0x0040
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// Float32FromBF16 widens a bfloat16 exactly.
func Float32FromBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// Float32FromF16 widens an IEEE half exactly.
func Float32FromF16(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf/NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		// subnormal: value = mant × 2^-24
		f := float32(mant) * (1.0 / (1 << 24))
		if sign != 0 {
			f = -f
		}
		return f
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// F16FromFloat32 rounds f to an IEEE half, to nearest with ties to even;
// overflow gives ±Inf, NaN stays NaN.
func F16FromFloat32(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	abs := b & 0x7fffffff
	switch {
	case abs > 0x7f800000:
		return sign | 0x7e00
	case abs >= 0x477ff000: // ≥ 65520 rounds to Inf
		return sign | 0x7c00
	case abs >= 0x38800000: // normal half (≥ 2^-14)
		// rebias exponent and round 13 dropped bits to nearest even
		v := abs - (127-15)<<23
		v += 0x0fff + (v>>13)&1
		return sign | uint16(v>>13)
	case abs < 0x33000000: // < 2^-25: rounds to zero
		return sign
	}
	// subnormal half: value = m × 2^-24, m = round(|f| × 2^24)
	exp := abs >> 23
	mant := abs&0x7fffff | 0x800000
	shift := 126 - exp // so that mant >> shift = |f| × 2^24 (truncated)
	m := mant >> shift
	rem := mant & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || (rem == half && m&1 == 1) {
		m++
	}
	return sign | uint16(m)
}

// EncodeF32 returns the little-endian bytes of xs.
func EncodeF32(xs []float32) []byte {
	out := make([]byte, 4*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
	}
	return out
}

// EncodeBF16 rounds xs to BF16 and returns the little-endian bytes.
func EncodeBF16(xs []float32) []byte {
	out := make([]byte, 2*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint16(out[2*i:], BF16FromFloat32(x))
	}
	return out
}

// EncodeF16 rounds xs to IEEE half and returns the little-endian bytes.
func EncodeF16(xs []float32) []byte {
	out := make([]byte, 2*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint16(out[2*i:], F16FromFloat32(x))
	}
	return out
}

// Float32FromF8E4M3 widens an 8-bit E4M3 "fn" float exactly: bias 7,
// subnormals m/8·2^−6, exponent 15 with mantissa 7 is NaN (there is no
// infinity).
func Float32FromF8E4M3(b uint8) float32 {
	sign := float32(1)
	if b&0x80 != 0 {
		sign = -1
	}
	exp, man := int(b>>3)&0xf, float32(b&7)
	switch {
	case exp == 0xf && man == 7:
		return float32(math.NaN())
	case exp == 0:
		return sign * man / 8 * float32(math.Ldexp(1, -6))
	}
	return sign * (1 + man/8) * float32(math.Ldexp(1, exp-7))
}

// Float32FromF8E5M2 widens an 8-bit E5M2 float exactly: bias 15,
// subnormals m/4·2^−14, exponent 31 is ±Inf (mantissa 0) or NaN.
func Float32FromF8E5M2(b uint8) float32 {
	// E5M2 is the top byte of an IEEE half.
	return Float32FromF16(uint16(b) << 8)
}

// Float32FromF8E8M0 widens an 8-bit E8M0 scale exactly: 2^(b−127), and
// NaN for 255.
func Float32FromF8E8M0(b uint8) float32 {
	if b == 0xff {
		return float32(math.NaN())
	}
	return float32(math.Ldexp(1, int(b)-127))
}

// DecodeFloat32 decodes F32, BF16, F16, F8_E4M3, F8_E5M2 or F8_E8M0 bytes into out
// (which must have room for len(b)/size elements) and returns the filled
// slice.
func DecodeFloat32(d DType, b []byte, out []float32) ([]float32, error) {
	sz := d.Size()
	if d != F32 && d != BF16 && d != F16 && d != F8E4M3 && d != F8E5M2 && d != F8E8M0 {
		return nil, fmt.Errorf("%w: cannot decode dtype %q as float32", ErrFormat, string(d))
	}
	if len(b)%sz != 0 {
		return nil, fmt.Errorf("%w: %d bytes is not a whole number of %s elements", ErrFormat, len(b), d)
	}
	n := len(b) / sz
	if cap(out) < n {
		out = make([]float32, n)
	}
	out = out[:n]
	for i := range out {
		switch d {
		case F32:
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		case BF16:
			out[i] = Float32FromBF16(binary.LittleEndian.Uint16(b[2*i:]))
		case F16:
			out[i] = Float32FromF16(binary.LittleEndian.Uint16(b[2*i:]))
		case F8E4M3:
			out[i] = Float32FromF8E4M3(b[i])
		case F8E5M2:
			out[i] = Float32FromF8E5M2(b[i])
		case F8E8M0:
			out[i] = Float32FromF8E8M0(b[i])
		}
	}
	return out, nil
}
