package quant_test

import (
	"math"
	"sort"
	"testing"

	"github.com/asyncrl/asyncrl/weights/quant"
	"github.com/asyncrl/asyncrl/weights/safetensors"
)

// Every code widens as weights/safetensors widens torch.float8_e4m3fn.
func TestDecodeE4M3MatchesSafetensors(t *testing.T) {
	for b := range 256 {
		got, want := quant.DecodeE4M3(uint8(b)), safetensors.Float32FromF8E4M3(uint8(b))
		if math.Float32bits(got) != math.Float32bits(want) && !(isNaN(got) && isNaN(want)) {
			t.Fatalf("code %#02x: %v, want %v", b, got, want)
		}
	}
}

func isNaN(f float32) bool { return f != f }

// positives are the finite non-negative E4M3 values in increasing order,
// with their codes.
func positives() (vals []float64, codes []uint8) { return posVals, posCodes }

var posVals, posCodes = func() (vals []float64, codes []uint8) {
	for b := range 0x7f { // 0x7f is NaN
		vals = append(vals, float64(quant.DecodeE4M3(uint8(b))))
		codes = append(codes, uint8(b))
	}
	return vals, codes
}()

// reference rounds y the slow way: the nearest finite E4M3 value by
// search, ties to the even code, saturating at ±448, NaN to NaN.
func reference(y float32) uint8 {
	if isNaN(y) {
		return 0x7f | signBit(y)
	}
	a := math.Abs(float64(y))
	vals, codes := positives()
	if a >= 448 {
		return 0x7e | signBit(y)
	}
	i := sort.SearchFloat64s(vals, a) // vals[i] ≥ a
	if vals[i] == a {
		return codes[i] | signBit(y)
	}
	lo, hi := i-1, i
	dl, dh := a-vals[lo], vals[hi]-a
	c := codes[hi]
	if dl < dh || (dl == dh && codes[lo]&1 == 0) {
		c = codes[lo]
	}
	return c | signBit(y)
}

func signBit(y float32) uint8 { return uint8(math.Float32bits(y)>>24) & 0x80 }

// Round to nearest even and saturation agree with the search reference
// on every midpoint between neighbouring codes (the ties), the values just
// either side of each midpoint, the edges, and a sweep of float32 bit
// patterns over the whole range.
func TestEncodeE4M3MatchesReference(t *testing.T) {
	vals, _ := positives()
	var ys []float32
	for i := 0; i+1 < len(vals); i++ {
		mid := float32((vals[i] + vals[i+1]) / 2) // exact in float32
		ys = append(ys, mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, 1000), float32(vals[i]))
	}
	ys = append(ys, 0, 448, 449, 464, 479.99, 480, 1e30, float32(math.Inf(1)), float32(math.NaN()),
		0x1p-6, math.Nextafter32(0x1p-6, 0), 0x1p-9, 0x1p-10, math.Nextafter32(0x1p-10, 1), 0x1p-11, 1e-30,
		math.SmallestNonzeroFloat32)
	for b := uint32(0); b < 0x80000000; b += 2039 {
		ys = append(ys, math.Float32frombits(b))
	}
	for _, y := range ys {
		for _, v := range []float32{y, -y} {
			if got, want := quant.EncodeE4M3(v), reference(v); got != want {
				t.Fatalf("EncodeE4M3(%g) = %#02x (%g), want %#02x (%g)", v, got, quant.DecodeE4M3(got), want, quant.DecodeE4M3(want))
			}
		}
	}
}

// Spot values from the OCP FP8 spec's E4M3 table.
func TestEncodeE4M3Edges(t *testing.T) {
	cases := []struct {
		y    float32
		want uint8
	}{
		{448, 0x7e}, {-448, 0xfe}, {1e9, 0x7e}, {float32(math.Inf(-1)), 0xfe}, // saturate
		{1, 0x38}, {0x1p-6, 0x08}, {0x1p-9, 0x01}, // 1, min normal, min subnormal
		{0x1p-10, 0x00},     // half the min subnormal: tie to even (0)
		{3 * 0x1p-10, 0x02}, // 1.5 steps: tie to even (2)
		{1.0625, 0x38},      // halfway 1 and 1.125: even mantissa (1)
		{1.1875, 0x3a},      // halfway 1.125 and 1.25: even mantissa (1.25)
		{float32(math.Copysign(0, -1)), 0x80},
	}
	for _, c := range cases {
		if got := quant.EncodeE4M3(c.y); got != c.want {
			t.Errorf("EncodeE4M3(%g) = %#02x, want %#02x", c.y, got, c.want)
		}
	}
	if got := quant.EncodeE4M3(float32(math.NaN())); got&0x7f != 0x7f {
		t.Errorf("NaN encodes as %#02x, want 0x7f/0xff", got)
	}
}

func TestDecodeE8M0(t *testing.T) {
	for b, want := range map[uint8]float64{127: 1, 128: 2, 0: math.Ldexp(1, -127), 254: math.Ldexp(1, 127), 119: 1.0 / 256} {
		if got := quant.DecodeE8M0(b); float64(got) != want {
			t.Errorf("DecodeE8M0(%d) = %g, want %g", b, got, want)
		}
	}
	if !isNaN(quant.DecodeE8M0(255)) {
		t.Error("E8M0 255 must be NaN")
	}
}
