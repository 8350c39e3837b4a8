package transformer

import "math"

// moeForward is one mixture-of-experts feed-forward over T rows of ws.h
// into out: the router picks top-k experts per row (qwen3_moe: softmax
// top-k; deepseek_v3: sigmoid with the correction bias, group-limited),
// each expert's SwiGLU runs over the rows that chose it, and every row sums
// weight · output over its experts in expert-id order (the order of
// transformers' loop over experts with index_add_), then DeepSeek adds
// its shared experts. The chosen ids go into each row's cache as its
// routes for decoder layer l.
func (m *Model) moeForward(ws *workspace, l int, M *moeLayer, seqs []*Seq, T int, out []float32) {
	c := &m.cfg
	H, E, K := c.HiddenSize, c.NumExperts, c.NumExpertsPerTok
	ws.router = grow(ws.router, T*E)
	ws.sel = grow(ws.sel, T*K)
	ws.gw = grow(ws.gw, T*K)
	ws.selScratch = grow(ws.selScratch, 2*E+c.NGroup)
	ws.mm(ws.router, ws.h, &M.router, T)
	L := c.NumHiddenLayers
	for t := range T {
		logits := ws.router[t*E : (t+1)*E]
		ids, wts := ws.sel[t*K:(t+1)*K], ws.gw[t*K:(t+1)*K]
		if c.Arch == DeepseekV3 {
			m.routeDeepseek(logits, M.corr, ids, wts, ws.selScratch)
		} else {
			routeSoftmax(logits, K, c.NormTopKProb, ids, wts, ws.selScratch)
		}
		s, p := seqs[ws.rowSeq[t]], int(ws.rowPos[t])
		copy(s.routes[(p*L+l)*K:(p*L+l+1)*K], ids)
	}
	// Group the (row, k) slots by expert.
	ws.ecount = grow(ws.ecount, E+1)
	clear(ws.ecount)
	for _, e := range ws.sel[:T*K] {
		ws.ecount[e+1]++
	}
	for e := range E {
		ws.ecount[e+1] += ws.ecount[e]
	}
	ws.erows = grow(ws.erows, T*K)
	starts := ws.ecount[:E]
	ws.efill = grow(ws.efill, E)
	fill := ws.efill // start offsets, advanced while filling
	copy(fill, starts)
	for slot, e := range ws.sel[:T*K] {
		ws.erows[fill[e]] = int32(slot)
		fill[e]++
	}
	out = out[:T*H]
	clear(out)
	ws.ein = grow(ws.ein, T*H)
	ws.eout = grow(ws.eout, T*H)
	for e := range E {
		lo, hi := int(starts[e]), int(fill[e])
		if lo == hi {
			continue
		}
		n := hi - lo
		for i, slot := range ws.erows[lo:hi] {
			t := int(slot) / K
			copy(ws.ein[i*H:(i+1)*H], ws.h[t*H:(t+1)*H])
		}
		m.mlpForward(ws, &M.experts[e], ws.ein, n, ws.eout)
		for i, slot := range ws.erows[lo:hi] {
			t := int(slot) / K
			w := ws.gw[slot]
			o, y := out[t*H:(t+1)*H], ws.eout[i*H:(i+1)*H]
			for d := range o {
				o[d] += y[d] * w
			}
		}
	}
	if M.shared != nil {
		m.mlpForward(ws, M.shared, ws.h, T, ws.eout)
		addTo(out, ws.eout[:T*H])
	}
}

// topKInto writes into ids the k indices of the largest scores,
// descending, ties to the lower index (torch.topk leaves ties
// unspecified; this makes the choice deterministic).
func topKInto(scores []float32, ids []int32) {
	k := len(ids)
	n := 0
	for e, v := range scores {
		if n == k {
			if !(v > scores[ids[k-1]]) {
				continue
			}
			n-- // the last one drops out
		}
		i := n
		for i > 0 && v > scores[ids[i-1]] {
			ids[i] = ids[i-1]
			i--
		}
		ids[i] = int32(e)
		n++
	}
}

// routeSoftmax is Qwen3MoeSparseMoeBlock's router (modeling_qwen3_moe.py
// @00d4b3d2): softmax over the logits in float32, top-k of the
// probabilities, renormalised to sum 1 when norm_topk_prob.
func routeSoftmax(logits []float32, k int, norm bool, ids []int32, wts []float32, scratch []float32) {
	p := scratch[:len(logits)]
	mx := float32(math.Inf(-1))
	for _, v := range logits {
		mx = max(mx, v)
	}
	var sum float32
	for i, v := range logits {
		e := float32(math.Exp(float64(v - mx)))
		p[i] = e
		sum += e
	}
	for i := range p {
		p[i] /= sum
	}
	topKInto(p, ids[:k])
	var s float32
	for i, id := range ids[:k] {
		wts[i] = p[id]
		s += wts[i]
	}
	if norm {
		for i := range wts[:k] {
			wts[i] /= s
		}
	}
}

// routeDeepseek is DeepseekV3TopkRouter (modeling_deepseek_v3.py
// @00b676f8): scores = σ(logits) in float32; the choice adds
// e_score_correction_bias (selection only); each of n_group groups is
// scored by the sum of its top-2 choices, the topk_group best groups are
// kept and the other experts' choices set to 0.0 (masked_fill 0.0, as
// transformers does), and top-k of that picks the experts. Their weights
// are the scores without the bias, divided by (their sum + 1e−20) when
// norm_topk_prob, times routed_scaling_factor.
func (m *Model) routeDeepseek(logits, corr []float32, ids []int32, wts []float32, scratch []float32) {
	c := &m.cfg
	E, G := len(logits), c.NGroup
	per := E / G
	scores, choice, gs := scratch[:E], scratch[E:2*E], scratch[2*E:2*E+G]
	for i, v := range logits {
		scores[i] = 1 / (1 + float32(math.Exp(float64(-v))))
		choice[i] = scores[i] + corr[i]
	}
	var two [2]int32
	for g := range G {
		topKInto(choice[g*per:(g+1)*per], two[:])
		gs[g] = choice[g*per+int(two[0])] + choice[g*per+int(two[1])]
	}
	var keepBuf [64]int32
	var keep []int32
	if c.TopKGroup <= len(keepBuf) {
		keep = keepBuf[:c.TopKGroup]
	} else {
		keep = make([]int32, c.TopKGroup)
	}
	topKInto(gs, keep)
	for g := range G {
		kept := false
		for _, k := range keep {
			if int(k) == g {
				kept = true
			}
		}
		if !kept {
			clear(choice[g*per : (g+1)*per])
		}
	}
	k := c.NumExpertsPerTok
	topKInto(choice, ids[:k])
	var s float32
	for i, id := range ids[:k] {
		wts[i] = scores[id]
		s += wts[i]
	}
	rsf := float32(c.RoutedScalingFactor)
	for i := range wts[:k] {
		if c.NormTopKProb {
			wts[i] /= s + 1e-20
		}
		wts[i] *= rsf
	}
}
