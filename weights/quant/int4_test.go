package quant

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func randMatrix(rows, cols int, seed uint64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 1))
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = float32(rng.NormFloat64() * 0.05)
	}
	return w
}

// TestINT4Bounds: every value is in [−7, 7], each group's largest |w|
// maps to ±7, every served weight is within half a step of its source,
// and FakeQuantINT4 is exactly Dequantize(QuantizeINT4).
func TestINT4Bounds(t *testing.T) {
	for _, tc := range []struct{ rows, cols, group int }{
		{8, 256, 32}, {8, 256, 128}, {3, 100, 32}, {5, 7, 128}, {2, 33, 32},
	} {
		w := randMatrix(tc.rows, tc.cols, uint64(tc.cols))
		q, err := QuantizeINT4(w, tc.rows, tc.cols, tc.group)
		if err != nil {
			t.Fatal(err)
		}
		ng := INT4Groups(tc.cols, tc.group)
		if q.Groups() != ng || len(q.Scales) != tc.rows*ng || len(q.Packed) != tc.rows*((tc.cols+1)/2) {
			t.Fatalf("%+v: %d groups, %d scales, %d bytes", tc, q.Groups(), len(q.Scales), len(q.Packed))
		}
		deq := make([]float32, len(w))
		if err := q.Dequantize(deq); err != nil {
			t.Fatal(err)
		}
		for r := range tc.rows {
			for g := range ng {
				s := q.Scales[r*ng+g]
				if s != int4BF16(s) || !(s > 0) {
					t.Fatalf("%+v: scale %v is not a positive BF16", tc, s)
				}
				var amaxQ int8
				for c := g * tc.group; c < min((g+1)*tc.group, tc.cols); c++ {
					v := q.Value(r, c)
					if v < -INT4Max || v > INT4Max {
						t.Fatalf("%+v: value %d at (%d,%d) outside [-7, 7]", tc, v, r, c)
					}
					amaxQ = max(amaxQ, v, -v)
					// Half a step, plus the BF16 roundings of the scale and of the
					// product (each ≤ 2^-8 relative of up to 7 steps).
					if d := math.Abs(float64(deq[r*tc.cols+c] - w[r*tc.cols+c])); d > (0.5+2*7.0/256)*float64(s)+1e-7 {
						t.Fatalf("%+v: |deq − w| = %v at (%d,%d), scale %v", tc, d, r, c, s)
					}
				}
				if amaxQ != INT4Max {
					t.Fatalf("%+v: group (%d,%d) max |q| %d, want 7", tc, r, g, amaxQ)
				}
			}
		}
		fq := make([]float32, len(w))
		if err := FakeQuantINT4(fq, w, tc.rows, tc.cols, tc.group); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(fq, deq) {
			t.Fatalf("%+v: FakeQuantINT4 differs from Dequantize(QuantizeINT4)", tc)
		}
		// In place gives the same.
		inPlace := slices.Clone(w)
		if err := FakeQuantINT4(inPlace, inPlace, tc.rows, tc.cols, tc.group); err != nil || !slices.Equal(inPlace, fq) {
			t.Fatalf("%+v: in-place fake quantisation differs (%v)", tc, err)
		}
	}
}

// TestINT4PackingOrder: element 2k in the low nibble of byte k, 2k+1 in
// the high nibble, each as q + 8 (compressed-tensors' pack_to_int32 order
// in little-endian bytes; vLLM's uint4b8), rows padded to whole bytes.
func TestINT4PackingOrder(t *testing.T) {
	// One group of 8: amax 7 so scale = 1 and q = w (rounded half to even).
	w := []float32{1, -2, 3, -7, 0, 7, 2.5, -0.5,
		-1, 2, -3, 7, 6, -6, 3.5, 0}
	q, err := QuantizeINT4(w, 2, 8, 8)
	if err != nil {
		t.Fatal(err)
	}
	wantQ := []int8{1, -2, 3, -7, 0, 7, 2, 0, -1, 2, -3, 7, 6, -6, 4, 0}
	var want []byte
	for i := 0; i < len(wantQ); i += 2 {
		want = append(want, byte(wantQ[i]+8)|byte(wantQ[i+1]+8)<<4)
	}
	if !slices.Equal(q.Packed, want) {
		t.Fatalf("packed % x, want % x", q.Packed, want)
	}
	if q.Packed[0] != 0x69 { // 1+8 = 9 low, −2+8 = 6 high
		t.Fatalf("byte 0 = %#x, want 0x69", q.Packed[0])
	}
	if !slices.Equal(q.Scales, []float32{1, 1}) {
		t.Fatalf("scales %v, want [1 1]", q.Scales)
	}
	// An odd row length pads the row's last byte's high nibble with 0.
	odd, err := QuantizeINT4([]float32{7, -7, 7, 1, 2, 3}, 2, 3, 32)
	if err != nil {
		t.Fatal(err)
	}
	if want := []byte{0x1f, 0x0f, 0xda, 0x0f}; !slices.Equal(odd.Packed, want) {
		t.Fatalf("odd rows packed % x, want % x", odd.Packed, want)
	}
	if odd.Value(1, 0) != 2 || odd.Value(1, 2) != 7 {
		t.Fatalf("odd row 1 values %d %d, want 2 7", odd.Value(1, 0), odd.Value(1, 2))
	}
}

// TestINT4EdgeCases: an all-zero group serves zeros (its scale is the
// floor, not 0/0); a group's scale does not leak into its neighbour;
// non-finite weights and bad shapes are refused naming what is wrong, and
// a refused FakeQuantINT4 leaves dst alone.
func TestINT4EdgeCases(t *testing.T) {
	w := make([]float32, 64)
	for i := 32; i < 64; i++ {
		w[i] = float32(i-48) * 0.01
	}
	q, err := QuantizeINT4(w, 1, 64, 32)
	if err != nil {
		t.Fatal(err)
	}
	if q.Scales[0] != int4BF16(int4MinScale) {
		t.Fatalf("zero group scale %v, want the floor %v", q.Scales[0], int4BF16(int4MinScale))
	}
	deq := make([]float32, 64)
	if err := q.Dequantize(deq); err != nil {
		t.Fatal(err)
	}
	for i := range 32 {
		if deq[i] != 0 || math.Signbit(float64(deq[i])) {
			t.Fatalf("zero group served %v at %d", deq[i], i)
		}
	}
	if q.Value(0, 32) != -INT4Max || q.Value(0, 48) != 0 {
		t.Fatalf("second group: q[32]=%d q[48]=%d, want -7 and 0", q.Value(0, 32), q.Value(0, 48))
	}

	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		x := []float32{1, 2, bad, 4}
		dst := []float32{9, 9, 9, 9}
		if _, err := QuantizeINT4(x, 2, 2, 32); !errors.Is(err, ErrINT4) {
			t.Fatalf("QuantizeINT4 with %v: %v, want ErrINT4", bad, err)
		}
		if err := FakeQuantINT4(dst, x, 2, 2, 32); !errors.Is(err, ErrINT4) || !slices.Equal(dst, []float32{9, 9, 9, 9}) {
			t.Fatalf("FakeQuantINT4 with %v: %v, dst %v", bad, err, dst)
		}
	}
	for _, tc := range []struct{ n, rows, cols, group int }{
		{4, 2, 2, 0}, {4, 0, 4, 32}, {4, 3, 2, 32}, {0, 0, 0, 32},
	} {
		if _, err := QuantizeINT4(make([]float32, tc.n), tc.rows, tc.cols, tc.group); !errors.Is(err, ErrINT4) {
			t.Fatalf("%+v: %v, want ErrINT4", tc, err)
		}
	}
	if err := FakeQuantINT4(make([]float32, 3), make([]float32, 4), 2, 2, 32); !errors.Is(err, ErrINT4) {
		t.Fatalf("short dst: %v", err)
	}
	if err := q.Dequantize(make([]float32, 3)); !errors.Is(err, ErrINT4) {
		t.Fatalf("short dequantize dst: %v", err)
	}
}
