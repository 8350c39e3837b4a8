package transformer

// dotGo is Σ a[i]·b[i] over len(a) with four partial sums (lanes i mod 4)
// added as (s0+s1)+(s2+s3), then the tail in order. dot4Go computes four
// such dot products sharing b with exactly the same arithmetic per
// product, so batching rows never changes a result.
func dotGo(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= n; i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	s := (s0 + s1) + (s2 + s3)
	for ; i < n; i++ {
		s += a[i] * b[i]
	}
	return s
}

func dot4Go(a0, a1, a2, a3, b []float32) (float32, float32, float32, float32) {
	n := len(b)
	a0, a1, a2, a3 = a0[:n], a1[:n], a2[:n], a3[:n]
	var p0, p1, p2, p3 float32
	var q0, q1, q2, q3 float32
	var r0, r1, r2, r3 float32
	var u0, u1, u2, u3 float32
	i := 0
	for ; i+4 <= n; i += 4 {
		b0, b1, b2, b3 := b[i], b[i+1], b[i+2], b[i+3]
		p0 += a0[i] * b0
		p1 += a0[i+1] * b1
		p2 += a0[i+2] * b2
		p3 += a0[i+3] * b3
		q0 += a1[i] * b0
		q1 += a1[i+1] * b1
		q2 += a1[i+2] * b2
		q3 += a1[i+3] * b3
		r0 += a2[i] * b0
		r1 += a2[i+1] * b1
		r2 += a2[i+2] * b2
		r3 += a2[i+3] * b3
		u0 += a3[i] * b0
		u1 += a3[i+1] * b1
		u2 += a3[i+2] * b2
		u3 += a3[i+3] * b3
	}
	s0, s1, s2, s3 := (p0+p1)+(p2+p3), (q0+q1)+(q2+q3), (r0+r1)+(r2+r3), (u0+u1)+(u2+u3)
	for ; i < n; i++ {
		s0 += a0[i] * b[i]
		s1 += a1[i] * b[i]
		s2 += a2[i] * b[i]
		s3 += a3[i] * b[i]
	}
	return s0, s1, s2, s3
}
