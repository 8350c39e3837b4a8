package transformer

import (
	"fmt"
	"math"
)

// workspace is one forward pass's scratch memory, reused across calls
// (Model.pool), so steady decoding does not allocate.
type workspace struct {
	seqs           []*Seq
	rowSeq, rowPos []int32
	x, h, tmp      []float32 // [T, hidden]
	q, k, v        []float32 // [T, heads·qk], [T, kvHeads·qk], [T, kvHeads·v]
	att            []float32 // [T, heads·v]
	ff1, ff2       []float32 // [T, intermediate]
	qa, kva, kpass []float32 // MLA: [T, q_lora], [T, kv_lora+rope], [T, kv_lora]
	kvb            []float32 // MLA: [T, heads·(nope+v)]
	router         []float32 // [T, experts]
	sel            []int32   // [T, topK]
	gw             []float32 // [T, topK]
	ein, eout      []float32 // one expert's rows: [T, hidden]
	erows          []int32   // (row·topK + k) slots per expert, grouped
	ecount, efill  []int32   // per expert
	hn             []float32 // [seqs, hidden]
	last           []int
	scores         [][]float32 // per chunk: attention scores
	scratch        [][]float32 // per chunk: rope scratch
	selScratch     []float32
	// The parallel loops' bodies and their WaitGroup live here, so a
	// forward pass starts them without allocating.
	gt  gemmTask
	at  attendTask
	par pool
}

// grow returns b resized to n, reallocating (with room to double) only
// when its capacity is short: buffers that grow by a row per step (the
// attention scores) reallocate O(log n) times.
func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n, max(n, 2*cap(b)))
	}
	return b[:n]
}

func (m *Model) getWS() *workspace {
	if ws, ok := m.pool.Get().(*workspace); ok {
		return ws
	}
	return &workspace{}
}

// checkBatch validates a Forward call before anything changes.
func (m *Model) checkBatch(seqs []*Seq, toks [][]int32, logits [][]float32) error {
	if len(toks) != len(seqs) || (logits != nil && len(logits) != len(seqs)) {
		return fmt.Errorf("transformer: %d sequences, %d token lists, %d logit buffers", len(seqs), len(toks), len(logits))
	}
	stamp := m.stamp.Add(1)
	for i, s := range seqs {
		if s == nil || s.m != m {
			return fmt.Errorf("transformer: sequence %d's cache was not built by this model", i)
		}
		if s.mark == stamp {
			return fmt.Errorf("transformer: sequence %d appears twice in one forward", i)
		}
		s.mark = stamp
		if len(toks[i]) == 0 {
			return fmt.Errorf("transformer: sequence %d: no tokens to forward", i)
		}
		if s.n+len(toks[i]) > m.cfg.MaxPositionEmbeddings {
			return fmt.Errorf("transformer: sequence %d: %d tokens exceed max_position_embeddings %d", i, s.n+len(toks[i]), m.cfg.MaxPositionEmbeddings)
		}
		for _, t := range toks[i] {
			if t < 0 || int(t) >= m.cfg.VocabSize {
				return fmt.Errorf("transformer: sequence %d: token id %d outside the vocabulary [0, %d)", i, t, m.cfg.VocabSize)
			}
		}
		if logits != nil && len(logits[i]) < m.cfg.VocabSize {
			return fmt.Errorf("transformer: sequence %d: logits buffer of %d, want %d", i, len(logits[i]), m.cfg.VocabSize)
		}
	}
	return nil
}

// forward runs the decoder over the new tokens of every sequence and,
// when logits is not nil, writes each sequence's next-token logits.
func (m *Model) forward(ws *workspace, seqs []*Seq, toks [][]int32, logits [][]float32) error {
	if err := m.checkBatch(seqs, toks, logits); err != nil {
		return err
	}
	m.decode(ws, seqs, toks)
	if logits == nil {
		return nil
	}
	c := &m.cfg
	H := c.HiddenSize
	ws.hn = grow(ws.hn, len(seqs)*H)
	for i, r := range ws.last {
		rmsNorm(ws.hn[i*H:(i+1)*H], ws.x[r*H:(r+1)*H], m.w.norm, 1, H, float32(c.RMSNormEps))
	}
	// Only each sequence's last row needs logits: a long prefill pays the
	// vocabulary projection once.
	ws.mmRows(logits, ws.hn, &m.w.head, len(seqs))
	return nil
}

// decode runs every layer over the T = Σ len(toks) new rows, appending
// keys, values and routes to the caches.
func (m *Model) decode(ws *workspace, seqs []*Seq, toks [][]int32) {
	c := &m.cfg
	H := c.HiddenSize
	T := 0
	for _, t := range toks {
		T += len(t)
	}
	ws.rowSeq = grow(ws.rowSeq, T)
	ws.rowPos = grow(ws.rowPos, T)
	ws.last = grow(ws.last, len(seqs))
	ws.x = grow(ws.x, T*H)
	ws.h = grow(ws.h, T*H)
	ws.tmp = grow(ws.tmp, T*H)
	r := 0
	for i, s := range seqs {
		s.grow(s.n + len(toks[i]))
		for j, tok := range toks[i] {
			ws.rowSeq[r], ws.rowPos[r] = int32(i), int32(s.n+j)
			copy(ws.x[r*H:(r+1)*H], m.w.embed[int(tok)*H:(int(tok)+1)*H])
			r++
		}
		ws.last[i] = r - 1
	}
	eps := float32(c.RMSNormEps)
	for l := range m.w.layers {
		L := &m.w.layers[l]
		rmsNorm(ws.h, ws.x, L.inNorm, T, H, eps)
		if c.MLA() {
			m.attnMLA(ws, l, &L.attn, seqs, T)
		} else {
			m.attnGQA(ws, l, &L.attn, seqs, T)
		}
		addTo(ws.x[:T*H], ws.tmp)
		rmsNorm(ws.h, ws.x, L.postNorm, T, H, eps)
		if L.mlp != nil {
			m.mlpForward(ws, L.mlp, ws.h, T, ws.tmp)
		} else {
			m.moeForward(ws, l, L.moe, seqs, T, ws.tmp)
		}
		addTo(ws.x[:T*H], ws.tmp)
	}
	for i, s := range seqs {
		s.n += len(toks[i])
	}
}

// chunkScratch sizes the per-chunk scratch buffers.
func (ws *workspace) chunkScratch(scores, scratch int) {
	w := workers()
	for len(ws.scores) < w {
		ws.scores = append(ws.scores, nil)
		ws.scratch = append(ws.scratch, nil)
	}
	for i := range w {
		ws.scores[i] = grow(ws.scores[i], scores)
		ws.scratch[i] = grow(ws.scratch[i], scratch)
	}
}

// attnGQA is grouped-query attention with RoPE (and Qwen3's per-head
// q_norm/k_norm before the rotation): Qwen3Attention / LlamaAttention.
func (m *Model) attnGQA(ws *workspace, l int, a *attention, seqs []*Seq, T int) {
	c := &m.cfg
	nh, kvh, hd := c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim
	ws.q = grow(ws.q, T*nh*hd)
	ws.k = grow(ws.k, T*kvh*hd)
	ws.v = grow(ws.v, T*kvh*hd)
	ws.mm(ws.q, ws.h, &a.q, T)
	ws.mm(ws.k, ws.h, &a.k, T)
	ws.mm(ws.v, ws.h, &a.v, T)
	ws.chunkScratch(0, 2*hd)
	scratch := ws.scratch[0]
	eps := float32(c.RMSNormEps)
	for t := range T {
		s, p := seqs[ws.rowSeq[t]], int(ws.rowPos[t])
		for h := range nh {
			qh := ws.q[(t*nh+h)*hd : (t*nh+h+1)*hd]
			if a.qNorm != nil {
				rmsNorm(qh, qh, a.qNorm, 1, hd, eps)
			}
			m.rope.apply(qh, p, scratch)
		}
		for g := range kvh {
			kh := ws.k[(t*kvh+g)*hd : (t*kvh+g+1)*hd]
			if a.kNorm != nil {
				rmsNorm(kh, kh, a.kNorm, 1, hd, eps)
			}
			m.rope.apply(kh, p, scratch)
			copy(s.kAt(l, g, p, hd), kh)
			copy(s.vAt(l, g, p, hd), ws.v[(t*kvh+g)*hd:(t*kvh+g+1)*hd])
		}
	}
	m.attend(ws, l, seqs, T, nh, kvh, hd, hd)
	ws.mm(ws.tmp, ws.att, &a.o, T)
}

// attnMLA is DeepSeek-V3's multi-head latent attention as transformers
// computes it (DeepseekV3Attention.forward, modeling_deepseek_v3.py
// @00b676f8): queries from q_proj or q_b_proj(q_a_layernorm(q_a_proj(x))),
// split per head into nope and rope parts; kv_a_proj_with_mqa gives the
// compressed kv (first kv_lora_rank, normed by kv_a_layernorm, expanded by
// kv_b_proj into each head's nope key and value) and one rope key shared
// by all heads. Keys are cat(k_nope, k_rope), queries cat(q_nope, q_rope);
// the cache holds each head's full key and value, as HF's cache does.
func (m *Model) attnMLA(ws *workspace, l int, a *attention, seqs []*Seq, T int) {
	c := &m.cfg
	nh := c.NumAttentionHeads
	nope, rd, vd, kvr := c.QKNopeHeadDim, c.QKRopeHeadDim, c.VHeadDim, c.KVLoraRank
	qk := nope + rd
	eps := float32(c.RMSNormEps)
	ws.q = grow(ws.q, T*nh*qk)
	if c.QLoraRank > 0 {
		ws.qa = grow(ws.qa, T*c.QLoraRank)
		ws.mm(ws.qa, ws.h, &a.qA, T)
		rmsNorm(ws.qa, ws.qa, a.qANorm, T, c.QLoraRank, eps)
		ws.mm(ws.q, ws.qa, &a.qB, T)
	} else {
		ws.mm(ws.q, ws.h, &a.q, T)
	}
	ws.kva = grow(ws.kva, T*(kvr+rd))
	ws.kpass = grow(ws.kpass, T*kvr)
	ws.kvb = grow(ws.kvb, T*nh*(nope+vd))
	ws.mm(ws.kva, ws.h, &a.kvA, T)
	for t := range T {
		rmsNorm(ws.kpass[t*kvr:(t+1)*kvr], ws.kva[t*(kvr+rd):t*(kvr+rd)+kvr], a.kvANorm, 1, kvr, eps)
	}
	ws.mm(ws.kvb, ws.kpass, &a.kvB, T)
	ws.chunkScratch(0, 3*rd)
	scratch := ws.scratch[0]
	for t := range T {
		s, p := seqs[ws.rowSeq[t]], int(ws.rowPos[t])
		krot := ws.kva[t*(kvr+rd)+kvr : (t+1)*(kvr+rd)]
		m.rope.apply(krot, p, scratch)
		for h := range nh {
			qh := ws.q[(t*nh+h)*qk : (t*nh+h+1)*qk]
			m.rope.apply(qh[nope:], p, scratch)
			kv := ws.kvb[(t*nh+h)*(nope+vd) : (t*nh+h+1)*(nope+vd)]
			ks := s.kAt(l, h, p, qk)
			copy(ks[:nope], kv[:nope])
			copy(ks[nope:], krot)
			copy(s.vAt(l, h, p, vd), kv[nope:])
		}
	}
	m.attend(ws, l, seqs, T, nh, nh, qk, vd)
	ws.mm(ws.tmp, ws.att, &a.o, T)
}

// attend computes, for every row t and head h, softmax(q·Kᵀ·scale) · V over
// the positions 0..pos(t) of its sequence's cache (causal), into ws.att
// [T, nh·vd]: eager_attention_forward (scores scaled after the product,
// softmax in float32). Rows × heads are split across cores.
func (m *Model) attend(ws *workspace, l int, seqs []*Seq, T, nh, kvh, kd, vd int) {
	ws.att = grow(ws.att, T*nh*vd)
	maxPos := 0
	for t := range T {
		maxPos = max(maxPos, int(ws.rowPos[t])+1)
	}
	ws.chunkScratch(maxPos, 0)
	ws.at = attendTask{ws: ws, l: l, seqs: seqs, nh: nh, group: nh / kvh, kd: kd, vd: vd, scale: m.scale}
	ws.par.parallelFor(T*nh, maxPos*(kd+vd), &ws.at)
	ws.at = attendTask{}
}

// attendTask is attend's chunk body: items [lo, hi) of rows × heads.
type attendTask struct {
	ws           *workspace
	seqs         []*Seq
	l, nh, group int
	kd, vd       int
	scale        float32
}

func (a *attendTask) run(c, lo, hi int) {
	ws, nh, kd, vd, l := a.ws, a.nh, a.kd, a.vd, a.l
	sc := ws.scores[c]
	for i := lo; i < hi; i++ {
		t, h := i/nh, i%nh
		s, p := a.seqs[ws.rowSeq[t]], int(ws.rowPos[t])
		g := h / a.group
		q := ws.q[(t*nh+h)*kd : (t*nh+h+1)*kd]
		kb := s.k[l][g*s.cap*kd:]
		vb := s.v[l][g*s.cap*vd:]
		n := p + 1
		mx := float32(math.Inf(-1))
		for j := range n {
			v := dot(q, kb[j*kd:(j+1)*kd]) * a.scale
			sc[j] = v
			mx = max(mx, v)
		}
		var sum float32
		for j := range n {
			e := float32(math.Exp(float64(sc[j] - mx)))
			sc[j] = e
			sum += e
		}
		out := ws.att[(t*nh+h)*vd : (t*nh+h+1)*vd]
		clear(out)
		for j := range n {
			wj := sc[j] / sum
			vj := vb[j*vd : (j+1)*vd]
			for d, x := range vj {
				out[d] += wj * x
			}
		}
	}
}

// mlpForward is the SwiGLU feed-forward down(silu(gate(x)) · up(x)) over T
// rows of in into out.
func (m *Model) mlpForward(ws *workspace, f *mlp, in []float32, T int, out []float32) {
	I := f.gate.out
	ws.ff1 = grow(ws.ff1, T*I)
	ws.ff2 = grow(ws.ff2, T*I)
	ws.mm(ws.ff1, in, &f.gate, T)
	ws.mm(ws.ff2, in, &f.up, T)
	a, u := ws.ff1[:T*I], ws.ff2[:T*I]
	for i := range a {
		a[i] = silu(a[i]) * u[i]
	}
	ws.mm(out, a, &f.down, T)
}
