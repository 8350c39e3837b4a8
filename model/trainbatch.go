package model

import "fmt"

// validateBatch checks every sequence and counts its trained tokens; a batch
// with none is valid here (a padding microbatch), Totals refuses it.
func (t *Trainer) validateBatch(b Batch) (tokens, maxLen int, err error) {
	V := int32(t.model.VocabSize())
	var seen []bool
	if t.cfg.SupportNorm {
		seen = make([]bool, V)
	}
	ce, err := checkLoss(b.Loss)
	if err != nil {
		return 0, 0, err
	}
	for si := range b.Sequences {
		s := &b.Sequences[si]
		if err := t.checkSequenceShape(s, si, ce); err != nil {
			return 0, 0, err
		}
		n, err := checkSequenceTokens(s, si, V, ce, seen)
		if err != nil {
			return 0, 0, err
		}
		tokens += n
		maxLen = max(maxLen, len(s.Tokens))
	}
	return tokens, maxLen, nil
}

// checkSequenceShape checks sequence si's per-token columns against its
// length, the model's context and its routes.
func (t *Trainer) checkSequenceShape(s *Sequence, si int, ce bool) error {
	n := len(s.Tokens)
	if len(s.LossMask) != n || (len(s.RolloutLogprobs) != n && !(ce && s.RolloutLogprobs == nil)) {
		return fmt.Errorf("%w: sequence %d: %d tokens but %d loss-mask and %d logprob entries", ErrBatch, si, n, len(s.LossMask), len(s.RolloutLogprobs))
	}
	if s.OldLogprobs != nil && len(s.OldLogprobs) != n {
		return fmt.Errorf("%w: sequence %d: %d tokens but %d old logprobs", ErrBatch, si, n, len(s.OldLogprobs))
	}
	if s.Support != nil && len(s.Support) != n {
		return fmt.Errorf("%w: sequence %d: %d tokens but %d support rows", ErrBatch, si, n, len(s.Support))
	}
	if n > t.model.MaxSeqLen() {
		return fmt.Errorf("%w: sequence %d: length %d exceeds max_seq_len %d", ErrBatch, si, n, t.model.MaxSeqLen())
	}
	if err := t.checkRoutes(s); err != nil {
		return fmt.Errorf("%w: sequence %d: %w", ErrBatch, si, err)
	}
	return nil
}

// checkSequenceTokens checks sequence si's token ids and, on each trained
// token, the RL inputs (unless ce) and support set; it returns the number of
// trained tokens.
func checkSequenceTokens(s *Sequence, si int, V int32, ce bool, seen []bool) (tokens int, err error) {
	for i, tok := range s.Tokens {
		if tok < 0 || tok >= V {
			return 0, fmt.Errorf("%w: sequence %d token %d: id %d outside vocabulary [0,%d)", ErrBatch, si, i, tok, V)
		}
		if s.LossMask[i] == 0 {
			continue
		}
		if i == 0 {
			return 0, fmt.Errorf("%w: sequence %d: loss mask set on the first token, which nothing predicts", ErrBatch, si)
		}
		if !ce {
			if err := checkTrainedToken(s, si, i, seen); err != nil {
				return 0, err
			}
		}
		tokens++ // under cross-entropy the RL inputs are not read
	}
	return tokens, nil
}

// checkTrainedToken checks trained token i's rollout and old logprobs and
// its support set.
func checkTrainedToken(s *Sequence, si, i int, seen []bool) error {
	if lp := s.RolloutLogprobs[i]; lp != lp || lp > 0 {
		return fmt.Errorf("%w: sequence %d token %d: rollout logprob %v is not a log-probability", ErrBatch, si, i, lp)
	}
	if s.OldLogprobs != nil {
		if lp := s.OldLogprobs[i]; lp != lp || lp > 0 {
			return fmt.Errorf("%w: sequence %d token %d: old logprob %v is not a log-probability", ErrBatch, si, i, lp)
		}
	}
	if seen != nil && s.Support != nil && s.Support[i] != nil {
		if err := checkSupport(s.Support[i], s.Tokens[i], seen); err != nil {
			return fmt.Errorf("%w: sequence %d token %d: %v", ErrBatch, si, i, err)
		}
	}
	return nil
}

// checkSupport requires ids in [0, len(seen)) or −1 padding, no duplicates,
// and the sampled token among them (SkyRL's engine puts it there, replacing
// the weakest candidate if needed). seen is scratch, returned all false.
func checkSupport(sup []int32, tok int32, seen []bool) error {
	var err error
	found := false
	for _, id := range sup {
		switch {
		case id == -1:
			continue
		case id < -1 || int(id) >= len(seen):
			err = fmt.Errorf("support id %d outside the vocabulary", id)
		case seen[id]:
			err = fmt.Errorf("support id %d listed twice", id)
		default:
			seen[id] = true
			found = found || id == tok
			continue
		}
		break
	}
	for _, id := range sup {
		if id >= 0 && int(id) < len(seen) {
			seen[id] = false
		}
	}
	if err == nil && !found {
		err = fmt.Errorf("sampled token %d is not in its support set", tok)
	}
	return err
}
