package engine

import (
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/asyncrl/asyncrl/model/sampler"
)

// kvHash is a BatchModel whose cache stores, per position, a hash of the
// token made with the model's own seed; its logits are a hash of the last
// four stored entries. A cache filled by another seed gives other logits
// than NextLogits would, so a stale KV cache after a weight swap shows.
type kvHash struct {
	seed     uint64
	vocab    int
	eos      []int32
	forwards atomic.Int64
	rows     atomic.Int64 // tokens forwarded (prefill rows count)
}

type kvHashSeq struct {
	owner *kvHash
	state []uint64
}

func (s *kvHashSeq) Len() int { return len(s.state) }

func (s *kvHashSeq) Routes(from int) []int32 { return nil }

func (m *kvHash) VocabSize() int { return m.vocab }
func (m *kvHash) MaxSeqLen() int { return 4096 }
func (m *kvHash) EOSIDs() []int32 {
	return m.eos
}

func (m *kvHash) entry(tok int32, pos int) uint64 {
	return splitmix(m.seed ^ uint64(uint32(tok))<<20 ^ uint64(pos))
}

func (m *kvHash) logits(state []uint64, out []float32) {
	x := uint64(0x1234)
	for _, e := range state[max(0, len(state)-4):] {
		x = splitmix(x ^ e)
	}
	for i := range out[:m.vocab] {
		v := splitmix(x + uint64(i)*0xbf58476d1ce4e5b9)
		out[i] = (float32(v>>11)/float32(1<<53)*2 - 1) * 4
	}
}

func (m *kvHash) NextLogits(tokens []int32, out []float32) {
	st := make([]uint64, len(tokens))
	for p, t := range tokens {
		st[p] = m.entry(t, p)
	}
	m.logits(st, out)
}

func (m *kvHash) NewSeq() SeqCache { return &kvHashSeq{owner: m} }

func (m *kvHash) Forward(seqs []SeqCache, tokens [][]int32, logits [][]float32) error {
	m.forwards.Add(1)
	for i, sc := range seqs {
		s := sc.(*kvHashSeq)
		if s.owner != m {
			return errors.New("foreign cache")
		}
		for _, t := range tokens[i] {
			s.state = append(s.state, m.entry(t, len(s.state)))
			m.rows.Add(1)
		}
		m.logits(s.state, logits[i])
	}
	return nil
}

var (
	_ BatchModel = (*kvHash)(nil)
	_ EOSModel   = (*kvHash)(nil)
)

// lpUnder is the greedy logprob of tok after prefix under m, from a
// stateless pass.
func lpUnder(m Model, prefix []int32, tok int32) float32 {
	l := make([]float32, m.VocabSize())
	m.NextLogits(prefix, l)
	return sampler.LogSoftmax(l, 1, make([]float32, len(l)))[tok]
}

// TestBatchModelOneForwardPerStep: with a BatchModel the engine calls one
// Forward per step for all running sequences, prefills once and then
// forwards one token per sequence per step, and every logprob equals the
// stateless model's.
func TestBatchModelOneForwardPerStep(t *testing.T) {
	m := &kvHash{seed: 1, vocab: 98}
	e, err := New(testConfig(), m)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	h := &harness{t: t, e: e, srv: newTestServer(t, e)}
	prompt := []int32{5, 6, 7, 8}
	r := h.complete(map[string]any{"prompt": prompt, "max_tokens": 10, "n": 4, "seed": 3, "temperature": 1, "ignore_eos": true, "return_token_ids": true})
	if len(r.Choices) != 4 {
		t.Fatalf("%d choices", len(r.Choices))
	}
	for _, c := range r.Choices {
		all := slices.Clone(prompt)
		for i, tok := range c.TokenIDs {
			if got, want := c.OutputLogprobs[i], lpUnder(m, all, tok); got != want {
				t.Fatalf("token %d: logprob %v, stateless %v", i, got, want)
			}
			all = append(all, tok)
		}
	}
	// 4 prompts of 4 tokens prefilled once, then one token per sequence
	// per step: 4·4 + 4·9 rows; steps: at most 10 forwards (one per
	// step), however the core batches admissions.
	if rows := m.rows.Load(); rows != 4*4+4*9 {
		t.Fatalf("%d rows forwarded, want %d (a cache was rebuilt or tokens recomputed)", rows, 4*4+4*9)
	}
	if f := m.forwards.Load(); f > 10+3 {
		t.Fatalf("%d forwards for 10 steps", f)
	}
}

// TestBatchModelSwapRecomputesKV: after a weight swap in the middle of a
// sequence, its cache is rebuilt on the new model: every token is computed
// over keys and values of the weights that produced it.
func TestBatchModelSwapRecomputesKV(t *testing.T) {
	a, b := &kvHash{seed: 1, vocab: 98}, &kvHash{seed: 2, vocab: 98}
	e, err := New(slowConfig(), a)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	h := &harness{t: t, e: e, srv: newTestServer(t, e)}
	prompt := []int32{5, 6, 7, 8, 9}
	ch := h.postAsync("/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 40, "ignore_eos": true, "return_token_ids": true}, "X-Request-Id", "swap-1")
	eventually(t, "first tokens", func() bool { return h.generated("swap-1") >= 3 })
	if code, _, out := h.post("/pause?mode=keep", nil); code != 200 {
		t.Fatalf("pause: %d %s", code, out)
	}
	if err := e.SetModel(b, 1); err != nil {
		t.Fatal(err)
	}
	if code, _, out := h.post("/resume", nil); code != 200 {
		t.Fatalf("resume: %d %s", code, out)
	}
	c := decodeCompletion(t, recv(t, ch))
	models := map[int64]Model{0: a, 1: b}
	all := slices.Clone(prompt)
	saw := map[int64]bool{}
	for i, tok := range c.TokenIDs {
		v := c.TokenWeightVersions[i]
		saw[v] = true
		if got, want := c.OutputLogprobs[i], lpUnder(models[v], all, tok); got != want {
			t.Fatalf("token %d (version %d): logprob %v, stateless under its weights %v", i, v, got, want)
		}
		all = append(all, tok)
	}
	if !saw[0] || !saw[1] {
		t.Fatalf("versions %v: the swap did not land mid-sequence", c.TokenWeightVersions)
	}
}

// TestEOSModelStops: a model's EOSIDs end generation (finish_reason stop)
// instead of the character tokenizer's EOS.
func TestEOSModelStops(t *testing.T) {
	m := &kvHash{seed: 4, vocab: 98}
	e, err := New(testConfig(), m)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	h := &harness{t: t, e: e, srv: newTestServer(t, e)}
	prompt := []int32{3, 4, 5}
	free := h.complete(map[string]any{"prompt": prompt, "max_tokens": 12, "temperature": 0, "ignore_eos": true, "return_token_ids": true}).Choices[0]
	// Greedy: make a token generated at step ≥ 4 that did not occur
	// earlier the model's EOS.
	k := -1
	for i := 4; i < len(free.TokenIDs) && k < 0; i++ {
		if !slices.Contains(free.TokenIDs[:i], free.TokenIDs[i]) {
			k = i
		}
	}
	if k < 0 {
		t.Fatalf("greedy run %v repeats every token from step 4", free.TokenIDs)
	}
	m.eos = []int32{free.TokenIDs[k]}
	c := h.complete(map[string]any{"prompt": prompt, "max_tokens": 12, "temperature": 0, "return_token_ids": true}).Choices[0]
	if c.FinishReason == nil || *c.FinishReason != "stop" || !slices.Equal(c.TokenIDs, free.TokenIDs[:k+1]) {
		t.Fatalf("finish %v tokens %v, want stop after %v", c.FinishReason, c.TokenIDs, free.TokenIDs[:k+1])
	}
}
