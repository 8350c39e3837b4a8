package quant_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/asyncrl/asyncrl/weights/quant"
)

// matrices are the random and adversarial inputs every scheme must round
// trip within the bound: odd shapes with partial blocks, blocks whose
// magnitudes differ by orders, a huge dynamic range inside one block
// (its small values fall into the subnormal range), exact E4M3 ties after
// scaling, all zeros, and non-finite values.
func matrices() map[string]struct {
	rows, cols int
	w          []float32
} {
	rng := rand.New(rand.NewPCG(1, 2))
	out := map[string]struct {
		rows, cols int
		w          []float32
	}{}
	add := func(name string, rows, cols int, f func(i, r, c int) float32) {
		w := make([]float32, rows*cols)
		for i := range w {
			w[i] = f(i, i/cols, i%cols)
		}
		out[name] = struct {
			rows, cols int
			w          []float32
		}{rows, cols, w}
	}
	add("normal 256x384", 256, 384, func(int, int, int) float32 { return float32(rng.NormFloat64() * 0.02) })
	add("partial blocks 130x200", 130, 200, func(int, int, int) float32 { return float32(rng.NormFloat64()) })
	add("one row 1x33", 1, 33, func(int, int, int) float32 { return float32(rng.NormFloat64() * 100) })
	add("scales differ per block", 256, 256, func(_, r, c int) float32 {
		return float32(rng.NormFloat64() * math.Pow(10, float64((r/128+c/32)%9-4)))
	})
	add("dynamic range in a block", 128, 128, func(i, _, _ int) float32 {
		return float32(math.Copysign(math.Pow(10, float64(i%13-8)), float64(i%2*2-1)))
	})
	add("ties", 128, 128, func(i, _, _ int) float32 {
		if i == 0 {
			return 448 // scale 1 for FP8 and MXFP8: every value below is its own scaled value
		}
		return float32(1+float64(i%8)/8+1.0/16) * float32(math.Ldexp(1, i%12-6))
	})
	add("zeros", 64, 64, func(int, int, int) float32 { return 0 })
	add("tiny", 32, 64, func(int, int, int) float32 { return float32(rng.NormFloat64() * 1e-38) })
	add("non-finite", 128, 128, func(i, _, _ int) float32 {
		switch i % 97 {
		case 0:
			return float32(math.NaN())
		case 1:
			return float32(math.Inf(1))
		case 2:
			return float32(math.Inf(-1))
		}
		return float32(rng.NormFloat64())
	})
	return out
}

// scaleOf is the scale the dequantiser applied to element i: served
// value / E4M3 value of its code.
func elementScales(t *testing.T, s quant.Scheme, wt, sc quant.Tensor) []float32 {
	t.Helper()
	rows, cols := int(wt.Shape[0]), int(wt.Shape[1])
	ones := quant.Tensor{Name: wt.Name, DType: wt.DType, Shape: wt.Shape, Data: make([]byte, rows*cols)}
	for i := range ones.Data {
		ones.Data[i] = 0x38 // 1.0
	}
	out, err := s.Dequantize(ones, sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The round trip quantise → dequantise is within the package's bound on
// every element of every matrix, for both E4M3 schemes (listed by name:
// another scheme in Lookup has a bound of its own):
// |x̂ − x| ≤ 2^−4·|x| + 2^−10·s (+2^−20 relative slack for the float32
// products); non-finite masters: NaN stays NaN, ±Inf saturate to ±448·s.
// Stats agree with a direct comparison.
func TestRoundTripWithinBound(t *testing.T) {
	for _, name := range []string{"fp8", "mxfp8"} {
		s, err := quant.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		for mname, m := range matrices() {
			wt, sc, st, err := s.Quantize("w", m.rows, m.cols, m.w)
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.Dequantize(wt, sc, nil)
			if err != nil {
				t.Fatalf("%s %s: %v", name, mname, err)
			}
			scales := elementScales(t, s, wt, sc)
			for i, x := range m.w {
				xs, y := float64(x), float64(got[i])
				sc := float64(scales[i])
				switch {
				case math.IsNaN(xs):
					if !math.IsNaN(y) {
						t.Fatalf("%s %s [%d]: NaN served as %g", name, mname, i, y)
					}
					continue
				case math.IsInf(xs, 0):
					if y != math.Copysign(float64(448*scales[i]), xs) {
						t.Fatalf("%s %s [%d]: %g served as %g, want ±448·%g", name, mname, i, xs, y, sc)
					}
					continue
				}
				bound := math.Ldexp(math.Abs(xs), -4) + math.Ldexp(sc, -10) + math.Ldexp(math.Abs(xs)+sc, -20)
				if e := math.Abs(y - xs); e > bound {
					t.Fatalf("%s %s [%d]: %g served as %g (scale %g): error %g > bound %g", name, mname, i, xs, y, sc, e, bound)
				}
			}
			ref := quant.Compare(m.w, got)
			if st.N != ref.N || st.MaxAbs != ref.MaxAbs || math.Abs(st.SumSq-ref.SumSq) > 1e-9*ref.SumSq {
				t.Fatalf("%s %s: stats %+v, direct comparison %+v", name, mname, st, ref)
			}
			if st.MaxRel > 1.0/16 {
				t.Fatalf("%s %s: MaxRel %g over the normal range exceeds 2^-4", name, mname, st.MaxRel)
			}
		}
	}
}

// The FP8 block layout is DeepSeek's: [⌈rows/128⌉, ⌈cols/128⌉] F32 scales,
// each amax/448, the block's amax element coded as ±448 (0x7e).
func TestFP8BlockLayout(t *testing.T) {
	s, _ := quant.Lookup("fp8")
	rows, cols := 200, 130
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = 0.5
	}
	w[3*cols+140-128] = -7 // block (0, 0): amax 7
	w[150*cols+129] = 896  // block (1, 1): amax 896 → scale 2
	wt, sc, _, err := s.Quantize("layers.0.weight", rows, cols, w)
	if err != nil {
		t.Fatal(err)
	}
	if sc.Name != "layers.0.weight_scale_inv" || sc.DType != "F32" || len(sc.Shape) != 2 || sc.Shape[0] != 2 || sc.Shape[1] != 2 {
		t.Fatalf("scale tensor %s %s %v", sc.Name, sc.DType, sc.Shape)
	}
	if wt.DType != "F8_E4M3" || len(wt.Data) != rows*cols {
		t.Fatalf("weight %s, %d bytes", wt.DType, len(wt.Data))
	}
	scales := elementScales(t, s, wt, sc)
	if scales[0] != 7.0/448 || scales[150*cols+129] != 2 || scales[cols-1] != 0.5/448 {
		t.Fatalf("scales %g %g %g, want 7/448, 2, 0.5/448", scales[0], scales[150*cols+129], scales[cols-1])
	}
	if wt.Data[3*cols+12] != 0xfe || wt.Data[150*cols+129] != 0x7e {
		t.Fatalf("amax codes %#02x %#02x, want 0xfe 0x7e", wt.Data[3*cols+12], wt.Data[150*cols+129])
	}
}

// MXFP8 scales are E8M0 bytes stored as U8 (vLLM's uint8 parameter), one
// per 32 elements of a row, the smallest power of two that maps the run's
// amax to at most 448.
func TestMXFP8ScaleBytes(t *testing.T) {
	s, _ := quant.Lookup("mxfp8")
	amaxes := []float32{448, 449, 1, 896, 0, 3e-38}
	want := []uint8{127, 128, 119, 128, 0, 0}
	w := make([]float32, 32*len(amaxes))
	for i, a := range amaxes {
		w[32*i+5] = a
	}
	_, sc, _, err := s.Quantize("head.weight", 1, len(w), w)
	if err != nil {
		t.Fatal(err)
	}
	if sc.Name != "head.weight_scale" || sc.DType != "U8" || sc.Shape[0] != 1 || sc.Shape[1] != int64(len(amaxes)) {
		t.Fatalf("scale tensor %s %s %v", sc.Name, sc.DType, sc.Shape)
	}
	for i := range want {
		if sc.Data[i] != want[i] {
			t.Errorf("amax %g: scale byte %d, want %d", amaxes[i], sc.Data[i], want[i])
		}
	}
}

// A scale labelled F8_E8M0 (checkpoints written before the scale became
// U8, or by other tools) holds the same bytes and dequantises the same.
func TestMXFP8ScaleDTypeEitherLabel(t *testing.T) {
	s, _ := quant.Lookup("mxfp8")
	w := make([]float32, 3*70)
	for i := range w {
		w[i] = float32(i%13-6) * float32(math.Pow(2, float64(i%9-4)))
	}
	wt, sc, _, err := s.Quantize("w", 3, 70, w)
	if err != nil {
		t.Fatal(err)
	}
	asU8, err := s.Dequantize(wt, sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	sc.DType = "F8_E8M0"
	asE8M0, err := s.Dequantize(wt, sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range asU8 {
		if math.Float32bits(asU8[i]) != math.Float32bits(asE8M0[i]) {
			t.Fatalf("[%d]: U8 scale serves %g, F8_E8M0 %g", i, asU8[i], asE8M0[i])
		}
	}
	sc.DType = "I8"
	if _, err := s.Dequantize(wt, sc, nil); !errors.Is(err, quant.ErrFormat) {
		t.Errorf("an I8 scale: %v, want ErrFormat", err)
	}
}

// Tensors that do not fit the scheme are errors, not panics.
func TestDequantizeRejectsMismatch(t *testing.T) {
	for _, name := range []string{"fp8", "mxfp8"} {
		s, _ := quant.Lookup(name)
		wt, sc, _, err := s.Quantize("w", 64, 64, make([]float32, 64*64))
		if err != nil {
			t.Fatal(err)
		}
		bad := []struct {
			what   string
			wt, sc quant.Tensor
		}{
			{"weight dtype", quant.Tensor{Name: "w", DType: "BF16", Shape: wt.Shape, Data: wt.Data}, sc},
			{"weight bytes", quant.Tensor{Name: "w", DType: wt.DType, Shape: wt.Shape, Data: wt.Data[1:]}, sc},
			{"scale shape", wt, quant.Tensor{Name: sc.Name, DType: sc.DType, Shape: []int64{sc.Shape[0] + 1, sc.Shape[1]}, Data: append(append([]byte{}, sc.Data...), make([]byte, len(sc.Data)/int(sc.Shape[0]))...)}},
			{"scale dtype", wt, quant.Tensor{Name: sc.Name, DType: "F64", Shape: sc.Shape, Data: sc.Data}},
		}
		for _, b := range bad {
			if _, err := s.Dequantize(b.wt, b.sc, nil); !errors.Is(err, quant.ErrFormat) {
				t.Errorf("%s: %s: err %v, want ErrFormat", name, b.what, err)
			}
		}
		if _, _, _, err := s.Quantize("w", 3, 3, make([]float32, 8)); !errors.Is(err, quant.ErrFormat) {
			t.Errorf("%s: 8 values for 3×3: err %v", name, err)
		}
	}
	if _, err := quant.Lookup("fp4"); !errors.Is(err, quant.ErrUnknown) {
		t.Errorf("Lookup(fp4): %v", err)
	}
}
