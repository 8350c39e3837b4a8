package transformer

import "math"

// matmul computes out[t·N+n] = Σ_k x[t·K+k] · w[n·K+k] (+ b[n]) for t < T,
// n < N: a Linear layer over T rows (W [N, K] as HF stores it). It splits
// the output columns across cores; each element is one dot product with
// a fixed order of additions (dot), so a row's result is the same whether
// it is computed alone or in a batch, by one goroutine or another.
func matmul(out, x, w, b []float32, T, K, N int) {
	if T == 0 || N == 0 {
		return
	}
	_ = out[T*N-1]
	_ = x[T*K-1]
	_ = w[N*K-1]
	parallelFor(N, T*K, func(_, lo, hi int) {
		matmulCols(out, N, nil, x, w, b, T, K, lo, hi)
	})
}

// matmulRows is matmul writing row t into outs[t] (len ≥ N): the logits
// of several sequences, each in its caller's buffer.
func matmulRows(outs [][]float32, x, w, b []float32, T, K, N int) {
	if T == 0 || N == 0 {
		return
	}
	parallelFor(N, T*K, func(_, lo, hi int) {
		matmulCols(nil, N, outs, x, w, b, T, K, lo, hi)
	})
}

// matmulCols computes columns [lo, hi) of matmul, into out (row stride
// ldo) or outs. Columns go in tiles small enough that a tile of W stays
// in cache while every row of x passes over it (W is read from memory
// once per call however many rows there are), four rows of x at a time
// sharing each loaded row of W.
func matmulCols(out []float32, ldo int, outs [][]float32, x, w, b []float32, T, K, lo, hi int) {
	tile := max(4, 8192/max(K, 1))
	row := func(t int) []float32 {
		if outs != nil {
			return outs[t]
		}
		return out[t*ldo : (t+1)*ldo]
	}
	for n0 := lo; n0 < hi; n0 += tile {
		n1 := min(n0+tile, hi)
		t := 0
		for ; t+4 <= T; t += 4 {
			x0 := x[t*K : (t+1)*K]
			x1 := x[(t+1)*K : (t+2)*K]
			x2 := x[(t+2)*K : (t+3)*K]
			x3 := x[(t+3)*K : (t+4)*K]
			o0, o1, o2, o3 := row(t), row(t+1), row(t+2), row(t+3)
			for n := n0; n < n1; n++ {
				d0, d1, d2, d3 := dot4(x0, x1, x2, x3, w[n*K:(n+1)*K])
				if b != nil {
					d0 += b[n]
					d1 += b[n]
					d2 += b[n]
					d3 += b[n]
				}
				o0[n], o1[n], o2[n], o3[n] = d0, d1, d2, d3
			}
		}
		for ; t < T; t++ {
			xt := x[t*K : (t+1)*K]
			ot := row(t)
			for n := n0; n < n1; n++ {
				d := dot(xt, w[n*K:(n+1)*K])
				if b != nil {
					d += b[n]
				}
				ot[n] = d
			}
		}
	}
}

// rmsNorm writes w · x/√(mean(x²)+eps) for each of the rows of x (n
// values each) into out (out may be x): transformers' RMSNorm in float32
// (hidden_states · rsqrt(variance + eps), then times the weight).
func rmsNorm(out, x, w []float32, rows, n int, eps float32) {
	for r := range rows {
		xr := x[r*n : (r+1)*n]
		or := out[r*n : (r+1)*n]
		var ss float32
		for _, v := range xr {
			ss += v * v
		}
		inv := float32(1 / math.Sqrt(float64(ss/float32(n)+eps)))
		for i, v := range xr {
			or[i] = w[i] * (v * inv)
		}
	}
}

// silu is x·σ(x) (torch.nn.functional.silu).
func silu(x float32) float32 { return x / (1 + float32(math.Exp(float64(-x)))) }

// addTo adds src into dst.
func addTo(dst, src []float32) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] += src[i]
	}
}
