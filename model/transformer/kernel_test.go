package transformer

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestDotKernels: the kernels in use (SIMD where the CPU has it) agree
// with a float64 reference, and dot4 computes each of its rows exactly as
// dot does — what makes a row's result independent of its batch.
func TestDotKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for n := 0; n <= 200; n++ {
		a := make([][]float32, 4)
		for r := range a {
			a[r] = make([]float32, n)
			for i := range a[r] {
				a[r][i] = float32(rng.NormFloat64())
			}
		}
		b := make([]float32, n)
		for i := range b {
			b[i] = float32(rng.NormFloat64())
		}
		s0, s1, s2, s3 := dot4(a[0], a[1], a[2], a[3], b)
		for r, got := range []float32{s0, s1, s2, s3} {
			if one := dot(a[r], b); one != got {
				t.Fatalf("n %d row %d: dot4 %v, dot %v", n, r, got, one)
			}
			var ref, mag float64
			for i := range b {
				ref += float64(a[r][i]) * float64(b[i])
				mag += math.Abs(float64(a[r][i]) * float64(b[i]))
			}
			if math.Abs(float64(got)-ref) > 1e-5*(mag+1) {
				t.Fatalf("n %d row %d: %v, float64 reference %v", n, r, got, ref)
			}
			if g := dotGo(a[r], b); math.Abs(float64(g)-ref) > 1e-5*(mag+1) {
				t.Fatalf("n %d: portable kernel %v, reference %v", n, g, ref)
			}
		}
	}
}

// TestGemmKernels: the matmul (SIMD where the CPU has it) agrees with a
// float64 reference for every shape edge (rows not a multiple of 4,
// columns not of 8 or 16), a row's result is bit-identical whether it is
// computed alone, in a batch or in another column split, and the portable
// kernel agrees too.
func TestGemmKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, sh := range []struct{ T, K, N int }{{1, 1, 1}, {1, 64, 300}, {3, 17, 33}, {4, 64, 16}, {5, 40, 47}, {9, 128, 1000}, {32, 64, 4099}} {
		l := &linear{in: sh.K, out: sh.N, w: make([]float32, sh.K*sh.N), b: make([]float32, sh.N)}
		for i := range l.w {
			l.w[i] = float32(rng.NormFloat64())
		}
		for i := range l.b {
			l.b[i] = float32(rng.NormFloat64())
		}
		w := &weights{head: *l}
		w.transpose()
		*l = w.head
		x := make([]float32, sh.T*sh.K)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		out := make([]float32, sh.T*sh.N)
		ws := &workspace{}
		ws.mm(out, x, l, sh.T)
		port := make([]float32, sh.T*sh.N)
		panels := (sh.N + 15) / 16
		gemmColsGo(rowSink{flat: port, ld: sh.N}, x, sh.T, sh.K, l.wt, sh.N, l.b, 0, panels)
		for r := range sh.T {
			alone := make([]float32, sh.N)
			ws.mm(alone, x[r*sh.K:(r+1)*sh.K], l, 1)
			split := make([]float32, sh.N)
			half := panels / 2
			gemmCols(rowSink{flat: split, ld: sh.N}, x[r*sh.K:(r+1)*sh.K], 1, sh.K, l.wt, sh.N, l.b, 0, half)
			gemmCols(rowSink{flat: split, ld: sh.N}, x[r*sh.K:(r+1)*sh.K], 1, sh.K, l.wt, sh.N, l.b, half, panels)
			for n := range sh.N {
				got := out[r*sh.N+n]
				if alone[n] != got || split[n] != got {
					t.Fatalf("%v row %d col %d: batched %v, alone %v, split %v", sh, r, n, got, alone[n], split[n])
				}
				var ref, mag float64
				for k := range sh.K {
					p := float64(x[r*sh.K+k]) * float64(l.w[n*sh.K+k])
					ref += p
					mag += math.Abs(p)
				}
				ref += float64(l.b[n])
				if math.Abs(float64(got)-ref) > 1e-5*(mag+1) || math.Abs(float64(port[r*sh.N+n])-ref) > 1e-5*(mag+1) {
					t.Fatalf("%v row %d col %d: %v (portable %v), float64 reference %v", sh, r, n, got, port[r*sh.N+n], ref)
				}
			}
		}
	}
}
