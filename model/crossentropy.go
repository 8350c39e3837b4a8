package model

import (
	"fmt"
	"math"
)

// LossCrossEntropy is the supervised objective (Batch.Loss): the negative
// log-likelihood of every loss-masked token under the model at temperature
// 1, −log softmax(logits)[token], weighted by the configured loss reduction
// (token_mean: the mean NLL over the mini-batch's trained tokens). It is
// what SFT trains with; the RL inputs (rollout logprobs, advantages) and
// terms (clipping, TIS, KL, entropy bonus) play no part. Tinker and SkyRL
// call it "cross_entropy" too.
const LossCrossEntropy = "cross_entropy"

// checkLoss validates a Batch.Loss; ce is true for cross-entropy.
func checkLoss(loss string) (ce bool, err error) {
	switch loss {
	case "":
		return false, nil
	case LossCrossEntropy:
		return true, nil
	}
	return false, fmt.Errorf("%w: loss %q: want \"\" (the configured policy loss) or %q", ErrBatch, loss, LossCrossEntropy)
}

// seqGradCE accumulates the cross-entropy gradient of one sequence into
// t.grads[w]: d(−weight·log p_tok)/d logits_v = weight·(p_v − [v = tok]).
// StepStats.Loss is then the reduced NLL and Entropy the mean entropy of
// the model's predictions at the trained tokens.
func (t *Trainer) seqGradCE(s *Sequence, weight float64, w int, st *tokenStats) {
	ws := t.wss[w]
	V := t.model.VocabSize()
	p := t.scratch[w][:V]
	dlogits := make32(ws, V)
	for i := 1; i < len(s.Tokens); i++ {
		if s.LossMask[i] == 0 {
			continue
		}
		logits := t.model.ForwardReplay(s.Tokens[:i], s.replayRow(i, t.model.RoutesLen()), ws)
		tok := s.Tokens[i]
		lse, ent := softmaxT(logits, 1, p)
		lp := float64(logits[tok]) - lse
		st.loss -= weight * lp
		st.ent += ent
		for v := range p {
			dlogits[v] = float32(weight * p[v])
		}
		dlogits[tok] = float32(weight * (p[tok] - 1))
		t.model.Backward(ws, dlogits, t.grads[w])
	}
}

// NLL is the cross-entropy loss of b under the current weights (the
// configured reduction, as a step with Batch.Loss LossCrossEntropy would
// report it) without changing anything: an evaluation pass.
func (t *Trainer) NLL(b Batch) (float64, error) {
	if t.pend.open {
		return 0, fmt.Errorf("%w: NLL while a step is being accumulated", ErrBatch)
	}
	b.Loss = LossCrossEntropy
	tot, err := t.Totals(b)
	if err != nil {
		return 0, err
	}
	if err := t.Begin(tot); err != nil { // for the reduction's denominators
		return 0, err
	}
	defer t.Discard()
	var sum float64
	V := t.model.VocabSize()
	p := t.scratch[0][:V]
	for si := range b.Sequences {
		s := &b.Sequences[si]
		n := s.TrainedTokens()
		if n == 0 {
			continue
		}
		weight := t.tokenWeight(s, n, tot, mbInfo{tokens: tot.Tokens})
		for i := 1; i < len(s.Tokens); i++ {
			if s.LossMask[i] == 0 {
				continue
			}
			logits := t.model.ForwardReplay(s.Tokens[:i], s.replayRow(i, t.model.RoutesLen()), t.wss[0])
			lse, _ := softmaxT(logits, 1, p)
			sum -= weight * (float64(logits[s.Tokens[i]]) - lse)
		}
	}
	if math.IsNaN(sum) {
		return 0, fmt.Errorf("%w: NaN loss", ErrBatch)
	}
	return sum, nil
}
