package transformer

import "golang.org/x/sys/cpu"

// AVX2+FMA micro-kernels (gemm_amd64.s) over the packed weights.

//go:noescape
func gemm4x16(x0, x1, x2, x3, p *float32, k int, o0, o1, o2, o3 *float32)

//go:noescape
func gemm1x64(x, p *float32, pstride, k int, o *float32)

//go:noescape
func gemm1x16(x, p *float32, k int, o *float32)

var hasFMA = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// gemmCols computes the 16-column panels [p0, p1) of x·Wᵀ into s (see
// gemm). A last panel narrower than 16 columns is computed into scratch
// and copied.
func gemmCols(s rowSink, x []float32, T, K int, wt []float32, N int, b []float32, p0, p1 int) {
	if !hasFMA {
		gemmColsGo(s, x, T, K, wt, N, b, p0, p1)
		return
	}
	ps := K * 16 // floats per panel
	tile := max(1, 2048/K)
	var tmp [4][16]float32
	for q0 := p0; q0 < p1; q0 += tile {
		q1 := min(q0+tile, p1)
		t := 0
		for ; t+4 <= T; t += 4 {
			x0, x1, x2, x3 := &x[t*K], &x[(t+1)*K], &x[(t+2)*K], &x[(t+3)*K]
			o0, o1, o2, o3 := s.row(t), s.row(t+1), s.row(t+2), s.row(t+3)
			for p := q0; p < q1; p++ {
				n := p * 16
				if n+16 <= N {
					_, _, _, _ = o0[n+15], o1[n+15], o2[n+15], o3[n+15]
					gemm4x16(x0, x1, x2, x3, &wt[p*ps], K, &o0[n], &o1[n], &o2[n], &o3[n])
					continue
				}
				gemm4x16(x0, x1, x2, x3, &wt[p*ps], K, &tmp[0][0], &tmp[1][0], &tmp[2][0], &tmp[3][0])
				copy(o0[n:N], tmp[0][:]) // the copy stops at N
				copy(o1[n:N], tmp[1][:])
				copy(o2[n:N], tmp[2][:])
				copy(o3[n:N], tmp[3][:])
			}
		}
		for ; t < T; t++ {
			xt := &x[t*K]
			o := s.row(t)
			p := q0
			for ; p+4 <= q1 && (p+4)*16 <= N; p += 4 {
				_ = o[p*16+63]
				gemm1x64(xt, &wt[p*ps], ps*4, K, &o[p*16])
			}
			for ; p < q1; p++ {
				n := p * 16
				if n+16 <= N {
					_ = o[n+15]
					gemm1x16(xt, &wt[p*ps], K, &o[n])
					continue
				}
				gemm1x16(xt, &wt[p*ps], K, &tmp[0][0])
				copy(o[n:N], tmp[0][:])
			}
		}
		addBias(s, T, b, q0*16, min(q1*16, N))
	}
}
