package quant_test

import (
	"math/rand/v2"
	"testing"

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

// BenchmarkQuantize: publish-time cost per 4096×4096 matrix, MB/s of
// float32 input, side by side with the BF16 encoding the publisher does
// without quantisation (and the dequantisation an engine does on load).
func BenchmarkQuantize(b *testing.B) {
	w := benchMatrix()
	b.Run("bf16-encode", func(b *testing.B) {
		b.SetBytes(int64(4 * len(w)))
		for b.Loop() {
			_ = safetensors.EncodeBF16(w)
		}
	})
	for _, name := range quant.Names() {
		s, _ := quant.Lookup(name)
		b.Run(name+"-quantize", func(b *testing.B) {
			b.SetBytes(int64(4 * len(w)))
			for b.Loop() {
				if _, _, _, err := s.Quantize("w", 4096, 4096, w); err != nil {
					b.Fatal(err)
				}
			}
		})
		wt, sc, _, _ := s.Quantize("w", 4096, 4096, w)
		out := make([]float32, len(w))
		b.Run(name+"-dequantize", func(b *testing.B) {
			b.SetBytes(int64(4 * len(w)))
			for b.Loop() {
				if _, err := s.Dequantize(wt, sc, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
