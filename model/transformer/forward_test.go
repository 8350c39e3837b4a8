package transformer

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestCachedDecodeEqualsStateless: for every architecture, a batch of
// sequences of mixed lengths prefilled and then decoded token by token in
// one batched Forward per step gives the logits a stateless prefill of
// the whole sequence gives (NextLogits), and the routes Routes reports.
func TestCachedDecodeEqualsStateless(t *testing.T) {
	for _, arch := range Archs() {
		t.Run(string(arch), func(t *testing.T) {
			const vocab = 97
			m := tinyModel(t, arch, vocab, 7)
			rng := rand.New(rand.NewPCG(1, 2))
			lens := []int{1, 5, 17, 3}
			seqs := make([]*Seq, len(lens))
			all := make([][]int32, len(lens))
			toks := make([][]int32, len(lens))
			logits := make([][]float32, len(lens))
			for i, n := range lens {
				seqs[i] = m.NewCache()
				all[i] = randTokens(rng, n, vocab)
				toks[i] = all[i]
				logits[i] = make([]float32, vocab)
			}
			for step := range 6 {
				if err := m.ForwardSeqs(seqs, toks, logits); err != nil {
					t.Fatal(err)
				}
				for i := range seqs {
					want := logitsOf(m, all[i])
					if d := maxAbsDiff(logits[i], want); d > 0 {
						t.Fatalf("step %d seq %d (len %d): cached logits differ from stateless by %g", step, i, len(all[i]), d)
					}
					if seqs[i].Len() != len(all[i]) {
						t.Fatalf("cache holds %d tokens, want %d", seqs[i].Len(), len(all[i]))
					}
					if m.routeK > 0 {
						got, want := seqs[i].Routes(0), m.Routes(all[i], 0)
						if !slices.Equal(got, want) {
							t.Fatalf("step %d seq %d: cached routes %v, stateless %v", step, i, got, want)
						}
					}
					next := int32(rng.IntN(vocab))
					all[i] = append(all[i], next)
					toks[i] = []int32{next}
				}
			}
		})
	}
}

// TestForwardRefusesBadInput: a Forward that would fail changes no cache.
func TestForwardRefusesBadInput(t *testing.T) {
	m := tinyModel(t, Qwen3, 50, 1)
	s := m.NewCache()
	out := [][]float32{make([]float32, 50)}
	if err := m.ForwardSeqs([]*Seq{s}, [][]int32{{1, 2, 3}}, out); err != nil {
		t.Fatal(err)
	}
	for name, toks := range map[string][]int32{"empty": {}, "out of vocabulary": {4, 50}, "negative": {-1}} {
		if err := m.ForwardSeqs([]*Seq{s}, [][]int32{toks}, out); err == nil {
			t.Fatalf("%s: no error", name)
		}
		if s.Len() != 3 {
			t.Fatalf("%s: a refused forward changed the cache to %d tokens", name, s.Len())
		}
	}
	other := tinyModel(t, Qwen3, 50, 2)
	if err := other.ForwardSeqs([]*Seq{s}, [][]int32{{1}}, out); err == nil {
		t.Fatal("a cache of another model was accepted")
	}
	if err := m.ForwardSeqs([]*Seq{s, s}, [][]int32{{1}, {2}}, [][]float32{out[0], out[0]}); err == nil {
		t.Fatal("the same cache twice in one forward was accepted")
	}
}

func BenchmarkNextLogitsTiny(b *testing.B) {
	for _, arch := range Archs() {
		b.Run(string(arch), func(b *testing.B) {
			m := tinyModel(b, arch, 1000, 1)
			toks := randTokens(rand.New(rand.NewPCG(1, 1)), 32, 1000)
			out := make([]float32, 1000)
			for b.Loop() {
				m.NextLogits(toks, out)
			}
			_ = fmt.Sprint(out[0])
		})
	}
}
