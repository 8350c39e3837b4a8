package transformer

import "golang.org/x/sys/cpu"

// The AVX2+FMA kernels (dot_amd64.s) run the inner products on amd64 CPUs
// that have them; the portable Go kernels (dot_generic.go) elsewhere. Both
// dot and dot4 use the same kernel family, so a result never depends on
// which of the two computed it.

//go:noescape
func dotAVX2(a, b *float32, n int) float32

//go:noescape
func dot4AVX2(a0, a1, a2, a3, b *float32, n int) (s0, s1, s2, s3 float32)

func init() {
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		dot, dot4 = dotSIMD, dot4SIMD
	}
}

// dotSIMD: the first n−n%16 elements in dotAVX2, the tail in order.
func dotSIMD(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	m := n &^ 15
	var s float32
	if m > 0 {
		s = dotAVX2(&a[0], &b[0], m)
	}
	for i := m; i < n; i++ {
		s += a[i] * b[i]
	}
	return s
}

func dot4SIMD(a0, a1, a2, a3, b []float32) (float32, float32, float32, float32) {
	n := len(b)
	a0, a1, a2, a3 = a0[:n], a1[:n], a2[:n], a3[:n]
	m := n &^ 15
	var s0, s1, s2, s3 float32
	if m > 0 {
		s0, s1, s2, s3 = dot4AVX2(&a0[0], &a1[0], &a2[0], &a3[0], &b[0], m)
	}
	for i := m; i < n; i++ {
		s0 += a0[i] * b[i]
		s1 += a1[i] * b[i]
		s2 += a2[i] * b[i]
		s3 += a3[i] * b[i]
	}
	return s0, s1, s2, s3
}
