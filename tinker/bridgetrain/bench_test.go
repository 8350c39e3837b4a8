package bridgetrain

import (
	"testing"

	"github.com/asyncrl/asyncrl/tinker"
)

// BenchmarkStep is one Tinker training step — forward_backward (cross
// entropy, 8 data of ~24 tokens) + optim_step — on gotrain in process and
// through the torch child (frames over pipes), from the same checkpoint.
// BENCHMARKS.md "Tinker server: exec trainer".
func BenchmarkStep(b *testing.B) {
	in := sft("rev abcdefg=gfedcba", "hello world, hello", "12+3=15; 7*6=42", "the quick brown fox",
		"jumps over the lazy dog", "asyncrl tinker bench", "0123456789abcdef", "ABCDEFGHIJKLMNOPQRSTU")
	p := tinker.DefaultAdamParams()
	p.LearningRate = 1e-3
	run := func(b *testing.B, tr interface {
		ForwardBackward(*tinker.ForwardBackwardInput, bool) (tinker.ForwardBackwardOutput, error)
		OptimStep(tinker.AdamParams) (map[string]float64, error)
	}) {
		b.ResetTimer()
		for range b.N {
			if _, err := tr.ForwardBackward(in, true); err != nil {
				b.Fatal(err)
			}
			if _, err := tr.OptimStep(p); err != nil {
				b.Fatal(err)
			}
		}
	}
	bm, gm, _ := setupB(b)
	b.Run("gotrain", func(b *testing.B) { run(b, gm) })
	b.Run("torch", func(b *testing.B) { run(b, bm) })
}
