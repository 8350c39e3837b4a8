package syncloop

import (
	"testing"

	"github.com/asyncrl/asyncrl/tasks"
)

// BenchmarkStep measures one full loop step (16×8 episodes of reverse:
// sampling on the serving copy, scoring, advantages, one trainer step,
// serving refresh).
func BenchmarkStep(b *testing.B) {
	tk, err := tasks.Get("reverse")
	if err != nil {
		b.Fatal(err)
	}
	l, err := New(tk, DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	var tokens int
	for b.Loop() {
		r, err := l.Step()
		if err != nil {
			b.Fatal(err)
		}
		tokens += r.Stats.Tokens
	}
	b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "gen_tokens/s")
}
