package quant_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/weights/quant"
	"github.com/asyncrl/asyncrl/weights/safetensors"
)

// benchMatrix is one 4096×4096 float32 weight matrix, N(0, 0.02).
func benchMatrix() []float32 {
	r := rand.New(rand.NewPCG(1, 1))
	w := make([]float32, 4096*4096)
	for i := range w {
		w[i] = float32(r.NormFloat64() * 0.02)
	}
	return w
}

// loopCPU runs f b.N times and reports MB of float32 input per CPU-second
// next to SetBytes's wall-clock MB/s.
func loopCPU(b *testing.B, n int, f func()) {
	b.SetBytes(int64(4 * n))
	var cpu time.Duration
	for b.Loop() {
		c0 := cpuTime()
		f()
		cpu += cpuTime() - c0
	}
	if cpu > 0 {
		b.ReportMetric(float64(4*n)*float64(b.N)/1e6/cpu.Seconds(), "MB/cpu-s")
	}
}

// BenchmarkQuantize: publish-time cost per 4096×4096 matrix, MB/s of
// float32 input, side by side with the BF16 encoding the publisher does
// without quantisation (and the dequantisation an engine does on load).
func BenchmarkQuantize(b *testing.B) {
	w := benchMatrix()
	b.Run("bf16-encode", func(b *testing.B) {
		loopCPU(b, len(w), func() { _ = safetensors.EncodeBF16(w) })
	})
	for _, name := range []string{"fp8", "mxfp8"} {
		s, _ := quant.Lookup(name)
		b.Run(name+"-quantize", func(b *testing.B) {
			loopCPU(b, len(w), func() {
				if _, _, _, err := s.Quantize("w", 4096, 4096, w); err != nil {
					b.Fatal(err)
				}
			})
		})
		wt, sc, _, _ := s.Quantize("w", 4096, 4096, w)
		out := make([]float32, len(w))
		b.Run(name+"-dequantize", func(b *testing.B) {
			loopCPU(b, len(w), func() {
				if _, err := s.Dequantize(wt, sc, out); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}
