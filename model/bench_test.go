package model

import (
	"math/rand/v2"
	"testing"

	"github.com/asyncrl/asyncrl/model/sampler"
)

// BenchmarkNextLogits reports single-goroutine inference throughput.
func BenchmarkNextLogits(b *testing.B) {
	m, _ := New(DefaultConfig(), 1)
	toks := []int32{1, 10, 20, 30, 40, 50, 60, 70, 80, 90, 5, 6, 7, 8, 9, 11, 12, 13}
	out := make([]float32, m.VocabSize())
	b.ReportAllocs()
	for b.Loop() {
		m.NextLogits(toks, out)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkTrainerStep reports trained tokens per second for a batch of 64
// sequences × 8 generated tokens.
func BenchmarkTrainerStep(b *testing.B) {
	for _, workers := range []int{1, 2} {
		b.Run("workers="+string(rune('0'+workers)), func(b *testing.B) {
			m, _ := New(DefaultConfig(), 1)
			cfg := DefaultTrainerConfig()
			cfg.Workers = workers
			tr, _ := NewTrainer(m, cfg)
			seqs := rollout(b, tr.ServingCopy(), 64, 8, rand.New(rand.NewPCG(1, 1)), sampler.DefaultParams())
			var tokens int
			for b.Loop() {
				st, err := tr.Step(Batch{Sequences: seqs})
				if err != nil {
					b.Fatal(err)
				}
				tokens += st.Tokens
			}
			b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
