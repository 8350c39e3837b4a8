package transformer

import "math"

// mm computes out[t·N+n] = Σ_k x[t·K+k] · W[n,k] (+ b[n]) for the T rows
// of x: the Linear layer l (K = l.in, N = l.out) over a batch of rows.
func (ws *workspace) mm(out, x []float32, l *linear, T int) {
	if T == 0 {
		return
	}
	_ = out[T*l.out-1]
	_ = x[T*l.in-1]
	ws.gemm(rowSink{flat: out, ld: l.out}, x, l, T)
}

// mmRows is mm writing row t into outs[t] (len ≥ N): the logits of several
// sequences, each in its caller's buffer.
func (ws *workspace) mmRows(outs [][]float32, x []float32, l *linear, T int) {
	if T == 0 {
		return
	}
	ws.gemm(rowSink{rows: outs}, x, l, T)
}

// rowSink is where a matmul writes its rows: one flat [T, ld] buffer or
// one slice per row.
type rowSink struct {
	flat []float32
	ld   int
	rows [][]float32
}

func (s rowSink) row(t int) []float32 {
	if s.rows != nil {
		return s.rows[t]
	}
	return s.flat[t*s.ld : (t+1)*s.ld]
}

// gemm splits the output columns across cores, a 16-column panel at a
// time, and runs the kernel over each chunk. Each output element is a
// chain of FMAs (or multiply-adds, portably) over k in order, whatever
// chunk, tile or row block holds it, so a row's result does not depend on
// the batch it is in, the split or the scheduling.
func (ws *workspace) gemm(s rowSink, x []float32, l *linear, T int) {
	ws.gt = gemmTask{s: s, x: x, l: l, T: T}
	ws.par.parallelFor((l.out+15)/16, T*l.in*16, &ws.gt)
	ws.gt = gemmTask{}
}

// gemmTask is one gemm's chunk body (panels [lo, hi)).
type gemmTask struct {
	s rowSink
	x []float32
	l *linear
	T int
}

func (g *gemmTask) run(_, lo, hi int) {
	gemmCols(g.s, g.x, g.T, g.l.in, g.l.wt, g.l.out, g.l.b, lo, hi)
}

// packPanels lays W [N, K] out as the kernels read it: the transpose in
// panels of 16 columns, panel p holding W[16p+j, k] at [k·16 + j]
// (columns past N are 0). A panel (K·16 floats) is contiguous, so a kernel
// streams it and a tile of panels stays in cache while the rows pass.
func packPanels(w []float32, N, K int) []float32 {
	panels := (N + 15) / 16
	out := make([]float32, panels*K*16)
	for n := range N {
		p, j := n/16, n%16
		row := w[n*K : (n+1)*K]
		base := out[p*K*16:]
		for k, v := range row {
			base[k*16+j] = v
		}
	}
	return out
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

// addBias adds b[n0:n1] to columns [n0, n1) of every row.
func addBias(s rowSink, T int, b []float32, n0, n1 int) {
	if b == nil {
		return
	}
	for t := range T {
		addTo(s.row(t)[n0:n1], b[n0:n1])
	}
}

// gemmColsGo is the portable kernel: panels [p0, p1) of x·Wᵀ from the
// packed weight, each element accumulated over k in order.
func gemmColsGo(s rowSink, x []float32, T, K int, wt []float32, N int, b []float32, p0, p1 int) {
	var acc [16]float32
	for p := p0; p < p1; p++ {
		n0, n1 := p*16, min(p*16+16, N)
		panel := wt[p*K*16 : (p+1)*K*16]
		for t := range T {
			acc = [16]float32{}
			for k, xv := range x[t*K : (t+1)*K] {
				w := panel[k*16 : k*16+16]
				for j := range acc {
					acc[j] += xv * w[j]
				}
			}
			copy(s.row(t)[n0:n1], acc[:])
		}
		addBias(s, T, b, n0, n1)
	}
}
