//go:build !amd64

package transformer

// gemmCols is the portable kernel off amd64.
func gemmCols(s rowSink, x []float32, T, K int, wt []float32, N int, b []float32, p0, p1 int) {
	gemmColsGo(s, x, T, K, wt, N, b, p0, p1)
}
