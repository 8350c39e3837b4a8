package model

import (
	"fmt"
	"sync"
)

// BatchTotals are the loss-reduction denominators of a whole mini-batch.
// Gradient accumulation needs them before the first microbatch: token_mean
// divides by the mini-batch's trained tokens, not a microbatch's, so that
// any split of a mini-batch into microbatches yields the gradient of the
// mini-batch in one piece.
type BatchTotals struct {
	// Sequences is the number of sequences in the mini-batch (padding
	// excluded): sequence_mean and seq_mean_token_sum_norm divide by it.
	Sequences int
	// Tokens is the number of trained (loss-mask 1) tokens: token_mean
	// divides by it, and Apply checks that exactly this many were
	// accumulated.
	Tokens int
	// MaxLen is the longest sequence (checked against the model; the
	// seq_mean_token_sum_norm denominator is the configured max_seq_len,
	// not this).
	MaxLen int
	// PromptTokens maps each prompt (Sequence.Group) to its trained
	// tokens: prompt_mean divides a token's loss by the number of prompts
	// times its prompt's tokens.
	PromptTokens map[string]int
	// Microbatches is the number of microbatches holding trained tokens
	// that the step will accumulate: token_mean_legacy averages the
	// per-microbatch token means over them, and Apply checks the count.
	// Totals sets 1; a caller splitting the mini-batch sets its own count.
	Microbatches int
	// Loss is the mini-batch's objective (Batch.Loss): every microbatch
	// accumulated into the step is trained with it.
	Loss string
}

// pending is the step being accumulated.
type pending struct {
	open      bool
	tot       BatchTotals
	maxSeqLen int // seq_mean_token_sum_norm's denominator per sequence
	st        tokenStats
	tokens    int // trained tokens accumulated so far
	micro     int // microbatches with trained tokens accumulated so far
}

func (p *pending) stats() StepStats {
	n := float64(p.tokens)
	if n == 0 {
		return StepStats{Loss: p.st.loss}
	}
	st := StepStats{
		Loss: p.st.loss, Entropy: p.st.ent / n,
		Mismatch: p.st.mismatch / n, KL: p.st.kl / n, Tokens: p.tokens,
		ClipFrac: float64(p.st.clipped) / n, ISRatio: p.st.isRatio / n,
		SameVersionTokens: p.st.same,
	}
	if p.st.same > 0 {
		st.MismatchSameVersion = p.st.mismatchSame / float64(p.st.same)
	}
	return st
}

// Totals validates a whole mini-batch and returns its reduction
// denominators (Microbatches 1: the mini-batch in one piece). A mini-batch
// without a trained token is an error, and so is a trained sequence without
// a Group under prompt_mean.
func (t *Trainer) Totals(b Batch) (BatchTotals, error) {
	tokens, maxLen, err := t.validateBatch(b)
	if err != nil {
		return BatchTotals{}, err
	}
	if tokens == 0 {
		return BatchTotals{}, fmt.Errorf("%w: no trained tokens (every loss mask is 0)", ErrBatch)
	}
	prompts := map[string]int{}
	for si := range b.Sequences {
		s := &b.Sequences[si]
		n := s.TrainedTokens()
		if s.Group == "" {
			if n > 0 && t.cfg.Reduction == PromptMean {
				return BatchTotals{}, fmt.Errorf("%w: sequence %d has no Group; prompt_mean averages per prompt", ErrBatch, si)
			}
			continue
		}
		prompts[s.Group] += n
	}
	return BatchTotals{Sequences: len(b.Sequences), Tokens: tokens, MaxLen: maxLen, PromptTokens: prompts, Microbatches: 1, Loss: b.Loss}, nil
}

// Begin opens an optimiser step whose loss is reduced over a mini-batch
// with totals tot; its microbatches then go to Accumulate and Apply takes
// the step. Only one step is open at a time.
func (t *Trainer) Begin(tot BatchTotals) error {
	switch {
	case t.pend.open:
		return fmt.Errorf("%w: Begin while a step is being accumulated (Apply or Discard it first)", ErrBatch)
	case tot.Sequences < 1 || tot.Tokens < 1 || tot.MaxLen < 1:
		return fmt.Errorf("%w: totals need ≥ 1 sequence, trained token and max length, got %+v", ErrBatch, tot)
	case tot.MaxLen > t.model.MaxSeqLen():
		return fmt.Errorf("%w: totals max length %d exceeds max_seq_len %d", ErrBatch, tot.MaxLen, t.model.MaxSeqLen())
	case t.cfg.Reduction == PromptMean && len(tot.PromptTokens) == 0:
		return fmt.Errorf("%w: prompt_mean needs the totals' PromptTokens (from Totals)", ErrBatch)
	case tot.Microbatches < 0:
		return fmt.Errorf("%w: totals microbatch count %d", ErrBatch, tot.Microbatches)
	}
	if _, err := checkLoss(tot.Loss); err != nil {
		return err
	}
	if tot.Microbatches == 0 {
		tot.Microbatches = 1
	}
	msl := t.cfg.ReductionMaxSeqLen
	if msl == 0 {
		msl = t.model.MaxSeqLen()
	}
	for _, g := range t.grads {
		g.Reset()
	}
	if err := t.fakeQuantIn(); err != nil {
		return err
	}
	t.pend = pending{open: true, tot: tot, maxSeqLen: msl}
	return nil
}

// Accumulate adds the gradient of one microbatch's share of the mini-batch
// loss to the open step. Sequences without a trained token (padding
// microbatches: one token, loss mask 0) contribute nothing. Within the
// microbatch, TrainerConfig.Workers goroutines own contiguous chunks and
// their sums are added in worker order, so the result depends on the
// microbatch split and Workers, never on timing.
//
// Memory: besides the microbatch itself, Accumulate uses only buffers the
// trainer allocated once (one gradient per worker, the workspaces; Apply
// adds one accumulator), so peak memory is bounded by the microbatch,
// whatever the mini-batch size. On error the open step is unchanged.
func (t *Trainer) Accumulate(mb Batch) error {
	if !t.pend.open {
		return fmt.Errorf("%w: Accumulate without Begin", ErrBatch)
	}
	tot := t.pend.tot
	if mb.Loss != "" && mb.Loss != tot.Loss {
		return fmt.Errorf("%w: microbatch loss %q in a step opened for %q", ErrBatch, mb.Loss, tot.Loss)
	}
	mb.Loss = tot.Loss
	tokens, maxLen, err := t.validateBatch(mb)
	if err != nil {
		return err
	}
	if t.pend.tokens+tokens > tot.Tokens {
		return fmt.Errorf("%w: microbatches hold %d trained tokens so far, more than the mini-batch's %d", ErrBatch, t.pend.tokens+tokens, tot.Tokens)
	}
	if maxLen > tot.MaxLen {
		return fmt.Errorf("%w: microbatch sequence of length %d is longer than the mini-batch's max %d", ErrBatch, maxLen, tot.MaxLen)
	}
	if tokens == 0 {
		return nil // padding: nothing to add (and nothing to compute)
	}
	if t.cfg.Reduction == TokenMeanLegacy && t.pend.micro >= tot.Microbatches {
		return fmt.Errorf("%w: more microbatches with trained tokens than the %d announced (token_mean_legacy divides by the count)", ErrBatch, tot.Microbatches)
	}
	if t.cfg.Reduction == PromptMean {
		for si := range mb.Sequences {
			if s := &mb.Sequences[si]; s.TrainedTokens() > 0 {
				if _, ok := tot.PromptTokens[s.Group]; !ok {
					return fmt.Errorf("%w: microbatch sequence %d: prompt %q is not in the mini-batch's totals", ErrBatch, si, s.Group)
				}
			}
		}
	}
	info := mbInfo{tokens: tokens}
	W := min(t.cfg.Workers, len(mb.Sequences))
	stats := make([]tokenStats, W)
	chunk := (len(mb.Sequences) + W - 1) / W
	// Each worker keeps adding into its own Grad across microbatches; the
	// first-layer table gradient is folded (Flatten) and the workers summed
	// once, in gradient(), so a microbatch costs only its tokens.
	work := func(w int) {
		lo, hi := w*chunk, min((w+1)*chunk, len(mb.Sequences))
		for si := lo; si < hi; si++ {
			t.seqGrad(&mb.Sequences[si], tot, info, w, &stats[w])
		}
	}
	if W == 1 {
		work(0)
	} else {
		var wg sync.WaitGroup
		for w := range W {
			wg.Go(func() { work(w) })
		}
		wg.Wait()
	}
	for w := range W {
		t.pend.st.add(stats[w])
	}
	t.pend.tokens += tokens
	t.pend.micro++
	return nil
}

// Apply takes the optimiser step on the accumulated gradient (global-norm
// clipping, AdamW), advances the version and closes the step. It refuses —
// leaving the step open, to be completed or discarded — unless the
// microbatches held exactly the trained tokens Begin was told of: a
// missing microbatch would silently change every token's weight.
func (t *Trainer) Apply() (StepStats, error) {
	if !t.pend.open {
		return StepStats{}, fmt.Errorf("%w: Apply without Begin", ErrBatch)
	}
	if t.pend.tokens != t.pend.tot.Tokens {
		return StepStats{}, fmt.Errorf("%w: accumulated %d trained tokens, the mini-batch has %d", ErrBatch, t.pend.tokens, t.pend.tot.Tokens)
	}
	if t.cfg.Reduction == TokenMeanLegacy && t.pend.micro != t.pend.tot.Microbatches {
		return StepStats{}, fmt.Errorf("%w: accumulated %d microbatches with trained tokens, %d announced", ErrBatch, t.pend.micro, t.pend.tot.Microbatches)
	}
	st := t.pend.stats()
	g := t.gradient() // at the fake-quantised weights, if any
	t.fakeQuantOut()
	st.GradNorm = t.applyAdam(g)
	t.step++
	st.Version = t.step
	t.pend = pending{}
	return st, nil
}

// gradient folds each worker's gradient and sums them in worker order into
// t.acc, which it returns. Idempotent while the step is open.
func (t *Trainer) gradient() []float64 {
	clear(t.acc)
	for _, g := range t.grads {
		for i, x := range t.model.Flatten(g) {
			t.acc[i] += x
		}
	}
	return t.acc
}

// Discard drops the open step, if any; the weights are untouched.
func (t *Trainer) Discard() {
	t.fakeQuantOut()
	t.pend = pending{}
}

// StepMicrobatches runs one optimiser step on b, accumulating the gradient
// over microbatches of b in the order given (each a list of indices into
// b.Sequences; together they must cover every sequence exactly once; an
// empty list is a padding microbatch and adds nothing). The result equals
// Step(b) up to float rounding. On error nothing changes.
func (t *Trainer) StepMicrobatches(b Batch, micro [][]int) (StepStats, error) {
	tot, err := t.Totals(b)
	if err != nil {
		return StepStats{}, err
	}
	seen := make([]bool, len(b.Sequences))
	covered := 0
	for _, mb := range micro {
		for _, i := range mb {
			if i < 0 || i >= len(seen) || seen[i] {
				return StepStats{}, fmt.Errorf("%w: microbatch index %d out of range or repeated (mini-batch of %d)", ErrBatch, i, len(seen))
			}
			seen[i] = true
			covered++
		}
	}
	if covered != len(seen) {
		return StepStats{}, fmt.Errorf("%w: microbatches cover %d of %d sequences", ErrBatch, covered, len(seen))
	}
	tot.Microbatches = 0
	for _, mb := range micro {
		for _, i := range mb {
			if b.Sequences[i].TrainedTokens() > 0 {
				tot.Microbatches++
				break
			}
		}
	}
	if err := t.Begin(tot); err != nil {
		return StepStats{}, err
	}
	view := Batch{Loss: b.Loss}
	for _, mb := range micro {
		view.Sequences = view.Sequences[:0]
		for _, i := range mb {
			view.Sequences = append(view.Sequences, b.Sequences[i])
		}
		if err := t.Accumulate(view); err != nil {
			t.Discard()
			return StepStats{}, err
		}
	}
	st, err := t.Apply()
	if err != nil {
		t.Discard()
	}
	return st, err
}

// seqRange returns [0, n).
func seqRange(n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = i
	}
	return r
}
