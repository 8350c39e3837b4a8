package model

import "math"

// mbInfo describes the microbatch a sequence is trained in (what
// token_mean_legacy divides by).
type mbInfo struct{ tokens int }

// tokenWeight is the factor SkyRL's apply_loss_reduction_to_advantages_minibatch
// scales a token's loss by, so that the sum over the mini-batch is the
// reduction.
func (t *Trainer) tokenWeight(s *Sequence, seqTok int, tot BatchTotals, mb mbInfo) float64 {
	switch t.cfg.Reduction {
	case SequenceMean:
		return 1 / (float64(seqTok) * float64(tot.Sequences))
	case SeqMeanTokenSumNorm:
		return 1 / (float64(tot.Sequences) * float64(t.pend.maxSeqLen))
	case PromptMean:
		return 1 / (float64(len(tot.PromptTokens)) * float64(max(tot.PromptTokens[s.Group], 1)))
	case TokenMeanLegacy:
		return 1 / (float64(max(mb.tokens, 1)) * float64(max(tot.Microbatches, 1)))
	}
	return 1 / float64(tot.Tokens)
}

// safeExp is SkyRL's safe_exp_delta: exp of x clamped to [−20, 20].
func safeExp(x float64) float64 { return math.Exp(min(max(x, -20), 20)) }

// policyToken is one token's policy loss (before the reduction weight and
// the TIS factor) and its derivative by the token's logprob lp, following
// SkyRL's ppo_utils.py: old is logp_old, adv the advantage; logIW is GSPO's
// sequence-level log importance weight sg(mean_t(lp − old)) (ignored by the
// other losses). clipped reports the clip statistic SkyRL logs.
func (c *TrainerConfig) policyToken(lp, old, adv, logIW float64) (loss, dlp float64, clipped bool) {
	switch c.PolicyLoss {
	case LossCISPO:
		// loss = −A·sg(clamp(r))·lp: the clamped weight carries no gradient.
		r := safeExp(lp - old)
		w := min(max(r, 1-c.CISPOEpsLow), 1+c.CISPOEpsHigh)
		return -adv * w * lp, -adv * w, r < 1-c.CISPOEpsLow || r > 1+c.CISPOEpsHigh
	case LossGSPO:
		// ratio = exp(min(lp − sg(lp) + sg(logIW), 10)): value exp(logIW),
		// d ratio/d lp = ratio unless the clamp at 10 is active.
		r, dr := math.Exp(min(logIW, 10)), math.Exp(logIW)
		if logIW > 10 {
			dr = 0
		}
		surr1, surr2 := r*adv, min(max(r, 1-c.EpsLow), 1+c.EpsHigh)*adv
		if surr1 <= surr2 {
			return -surr1, -adv * dr, false
		}
		return -surr2, 0, true
	}
	r := safeExp(lp - old)
	dr := r
	if lp-old > 20 || lp-old < -20 {
		dr = 0 // the clamp inside safe_exp_delta
	}
	surr1, surr2 := r*adv, min(max(r, 1-c.EpsLow), 1+c.EpsHigh)*adv
	loss, dlp = -surr1, -adv*dr
	if surr2 < surr1 {
		loss, dlp, clipped = -surr2, 0, true // no gradient through the clipped branch
	}
	if c.PolicyLoss == LossDualClip && adv < 0 {
		if cap := -adv * c.ClipRatioC; cap < loss {
			loss, dlp = cap, 0
		}
	}
	return loss, dlp, clipped
}

// tisToken is SkyRL's token-level TIS factor
// min(exp(old − rollout), token_tis_ratio_clip_high) (detached).
func (c *TrainerConfig) tisToken(old, rollout float64) float64 {
	return min(safeExp(old-rollout), c.TokenTISCap)
}

// seqGrad accumulates one sequence's loss gradient into t.grads[w].
func (t *Trainer) seqGrad(s *Sequence, tot BatchTotals, mb mbInfo, w int, st *tokenStats) {
	c := t.cfg
	ws := t.wss[w]
	V := t.model.VocabSize()
	sc := t.scratch[w]
	p, dl := sc[:V], sc[V:2*V]
	dlogits := make32(ws, V)
	invT := 1 / c.Temperature

	seqTok := s.TrainedTokens()
	if seqTok == 0 {
		return // padding, or a sequence with nothing to train
	}
	weight := t.tokenWeight(s, seqTok, tot, mb)
	if tot.Loss == LossCrossEntropy {
		t.seqGradCE(s, weight, w, st)
		return
	}
	A := float64(s.Advantage)
	q := t.sequenceTerms(s, seqTok, w)

	for i := 1; i < len(s.Tokens); i++ {
		if s.LossMask[i] == 0 {
			continue
		}
		logits := t.model.ForwardReplay(s.Tokens[:i], s.replayRow(i, t.model.RoutesLen()), ws)
		lse, ent := softmaxT(logits, invT, p)
		var sup []int32
		if c.SupportNorm && s.Support != nil {
			sup = s.Support[i]
		}
		lp := objectiveLogprob(logits, s.Tokens[i], invT, lse, p, dl, sup)
		dLossDlp := t.tokenLoss(s, i, lp, ent, A, weight, &q, st)
		c.tokenDlogits(dlogits, logits, p, dl, invT, lse, ent, dLossDlp, weight)
		t.model.Backward(ws, dlogits, t.grads[w])
	}
}

// seqTerms are one sequence's loss quantities that need every token's
// logprob before the first token's gradient.
type seqTerms struct {
	old    []float32 // the sequence's old logprobs, when it has them
	pre    []float64 // the current weights' logprobs, when needed up front
	logIW  float64   // GSPO's log importance weight
	seqTIS float64   // the sequence TIS factor
}

// oldAt is token i's old logprob, lp being its logprob now.
func (q *seqTerms) oldAt(i int, lp float64) float64 {
	switch {
	case q.old != nil:
		return float64(q.old[i])
	case q.pre != nil:
		return q.pre[i]
	}
	return lp // the own forward pass before the update: same weights, same value
}

// sequenceTerms computes GSPO's importance weight (zero when the old
// logprobs are the current weights' own) and the sequence TIS ratio.
func (t *Trainer) sequenceTerms(s *Sequence, seqTok, w int) seqTerms {
	c := &t.cfg
	q := seqTerms{old: s.OldLogprobs, seqTIS: 1.0}
	if (c.PolicyLoss == LossGSPO && s.OldLogprobs != nil) || (c.TISRatioType == TISSequence && s.OldLogprobs == nil) {
		q.pre = t.seqLogprobs(s, w)
	}
	if q.pre == nil && c.TISRatioType != TISSequence {
		return q
	}
	var sumIW, sumTIS float64
	for i, m := range s.LossMask {
		if m == 0 {
			continue
		}
		lp := 0.0
		if q.pre != nil {
			lp = q.pre[i]
		}
		old := q.oldAt(i, lp)
		sumIW += lp - old
		sumTIS += old - float64(s.RolloutLogprobs[i])
	}
	if c.PolicyLoss == LossGSPO && s.OldLogprobs != nil {
		q.logIW = sumIW / float64(seqTok)
	}
	if c.TISRatioType == TISSequence {
		q.seqTIS = min(safeExp(sumTIS), c.SequenceTISCap)
	}
	return q
}

// objectiveLogprob returns the logprob the objective uses for tok — over the
// full vocabulary, or over the sample support sup when non-nil — and fills
// dl = d lp / d(logits/T). p holds softmax(logits/T), lse its log-sum-exp.
func objectiveLogprob(logits []float32, tok int32, invT, lse float64, p, dl []float64, sup []int32) float64 {
	lpFull := float64(logits[tok])*invT - lse
	lp := lpFull
	clear(dl)
	if sup != nil {
		var ssum float64
		for _, id := range sup {
			if id >= 0 {
				ssum += p[id]
			}
		}
		lp = lpFull - math.Log(ssum)
		for _, id := range sup {
			if id >= 0 {
				dl[id] = -p[id] / ssum
			}
		}
	} else {
		for v := range p {
			dl[v] = -p[v]
		}
	}
	dl[tok] += 1
	return lp
}

// tokenLoss adds trained token i's loss (policy term × TIS, KL, entropy
// bonus) and statistics to st and returns d loss / d lp.
func (t *Trainer) tokenLoss(s *Sequence, i int, lp, ent, A, weight float64, q *seqTerms, st *tokenStats) float64 {
	c := &t.cfg
	rollout := float64(s.RolloutLogprobs[i])
	old := q.oldAt(i, lp)
	pg, dLossDlp, clipped := c.policyToken(lp, old, A, q.logIW)
	if clipped {
		st.clipped++
	}
	tis := 1.0
	switch c.TISRatioType {
	case TISToken:
		tis = c.tisToken(old, rollout)
	case TISSequence:
		tis = q.seqTIS
	}
	pg, dLossDlp = pg*tis, dLossDlp*tis
	x := rollout - lp
	k3 := math.Exp(x) - x - 1
	dLossDlp += c.KLCoef * (1 - math.Exp(x))
	tokLoss := pg + c.KLCoef*k3 - c.EntropyCoef*ent
	st.loss += weight * tokLoss
	st.ent += ent
	st.kl += k3
	st.mismatch += math.Abs(lp - rollout)
	if i < len(s.Version) && s.Version[i] == t.step {
		// generated by the very weights being trained (the step
		// has not been applied yet: t.step is the version before it)
		st.mismatchSame += math.Abs(lp - rollout)
		st.same++
	}
	st.isRatio += safeExp(old - rollout)
	return dLossDlp
}

// tokenDlogits fills dlogits = d loss/d logits = weight·[dLoss/dlp · dlp/du −
// coef·dH/du] / T, with dH/du_v = −p_v (log p_v + H).
func (c *TrainerConfig) tokenDlogits(dlogits, logits []float32, p, dl []float64, invT, lse, ent, dLossDlp, weight float64) {
	for v := range p {
		g := dLossDlp * dl[v]
		if c.EntropyCoef != 0 && p[v] > 0 {
			logp := float64(logits[v])*invT - lse
			g += c.EntropyCoef * p[v] * (logp + ent)
		}
		dlogits[v] = float32(weight * g * invT)
	}
}

// softmaxT fills p with softmax(logits/T) (invT = 1/T) and returns the
// log-sum-exp of logits/T and the distribution's entropy.
func softmaxT(logits []float32, invT float64, p []float64) (lse, ent float64) {
	maxV := math.Inf(-1)
	for _, l := range logits {
		maxV = max(maxV, float64(l)*invT)
	}
	var sum float64
	for v, l := range logits {
		p[v] = math.Exp(float64(l)*invT - maxV)
		sum += p[v]
	}
	lse = maxV + math.Log(sum)
	for v := range p {
		p[v] /= sum
		if p[v] > 0 {
			ent -= p[v] * (float64(logits[v])*invT - lse)
		}
	}
	return lse, ent
}

// tokenLogprob is the logprob the objective uses for Tokens[i] (support
// normalised when configured), by a forward pass on the current weights.
func (t *Trainer) tokenLogprob(s *Sequence, i, w int) float64 {
	V := t.model.VocabSize()
	p := t.scratch[w][2*V : 3*V]
	invT := 1 / t.cfg.Temperature
	logits := t.model.ForwardReplay(s.Tokens[:i], s.replayRow(i, t.model.RoutesLen()), t.wss[w])
	lse, _ := softmaxT(logits, invT, p)
	lp := float64(logits[s.Tokens[i]])*invT - lse
	if t.cfg.SupportNorm && s.Support != nil && s.Support[i] != nil {
		var ssum float64
		for _, id := range s.Support[i] {
			if id >= 0 {
				ssum += p[id]
			}
		}
		lp -= math.Log(ssum)
	}
	return lp
}

// seqLogprobs returns the current weights' logprob of every trained token
// of s (zero elsewhere), computed as the loss computes them.
func (t *Trainer) seqLogprobs(s *Sequence, w int) []float64 {
	out := make([]float64, len(s.Tokens))
	for i, m := range s.LossMask {
		if m != 0 && i > 0 {
			out[i] = t.tokenLogprob(s, i, w)
		}
	}
	return out
}

// make32 returns a float32 scratch of length n kept in the workspace.
func make32(ws *Workspace, n int) []float32 {
	if cap(ws.dlog) < n {
		ws.dlog = make([]float32, n)
	}
	return ws.dlog[:n]
}
