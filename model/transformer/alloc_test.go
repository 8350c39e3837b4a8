package transformer

import (
	"math/rand/v2"
	"testing"
)

// TestDecodeStepAllocations: once its caches have room, a batched decode
// step allocates nothing (the workspace is pooled, scratch reused, and the
// worker goroutines persistent).
func TestDecodeStepAllocations(t *testing.T) {
	for _, arch := range Archs() {
		for _, vocab := range []int{97, 60000} {
			m := tinyModel(t, arch, vocab, 1)
			rng := rand.New(rand.NewPCG(1, 1))
			B := 8
			seqs := make([]*Seq, B)
			toks := make([][]int32, B)
			logits := make([][]float32, B)
			for i := range seqs {
				seqs[i] = m.NewCache()
				seqs[i].grow(64)
				toks[i] = randTokens(rng, 5+i, vocab)
				logits[i] = make([]float32, vocab)
			}
			if err := m.ForwardSeqs(seqs, toks, logits); err != nil {
				t.Fatal(err)
			}
			for i := range toks {
				toks[i] = []int32{int32(i)}
			}
			step := func() {
				if err := m.ForwardSeqs(seqs, toks, logits); err != nil {
					t.Fatal(err)
				}
			}
			step()
			if a := testing.AllocsPerRun(10, step); a != 0 {
				t.Errorf("%s vocab %d: %v allocations per decode step", arch, vocab, a)
			}
		}
	}
}
