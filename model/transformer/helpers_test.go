package transformer

import (
	"math"
	"math/rand/v2"
	"testing"
)

func intp(v int) *int { return &v }

// tinyModel returns a tiny random model of arch over vocab tokens, with a
// non-zero DeepSeek correction bias so routing depends on it.
func tinyModel(t testing.TB, arch Arch, vocab int, seed uint64) *Model {
	t.Helper()
	c, err := NewPreset(arch, PresetTiny, vocab)
	if err != nil {
		t.Fatal(err)
	}
	c.BOSTokenID, c.EOSTokenIDs = intp(1), []int{2}
	m, err := InitWithOptions(c, GenerationConfig{BOSTokenID: intp(1), EOSTokenIDs: []int{2}}, seed, InitOptions{CorrectionBiasStd: 0.02})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func randTokens(rng *rand.Rand, n, vocab int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(rng.IntN(vocab))
	}
	return out
}

// maxAbsDiff is the largest |a−b| (Inf when lengths differ or NaN).
func maxAbsDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d float64
	for i := range a {
		x := math.Abs(float64(a[i] - b[i]))
		if math.IsNaN(x) {
			return math.Inf(1)
		}
		d = max(d, x)
	}
	return d
}

func logitsOf(m *Model, toks []int32) []float32 {
	out := make([]float32, m.VocabSize())
	m.NextLogits(toks, out)
	return out
}
