package trainer

import (
	"fmt"

	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/model/tokenizer"
)

// Backend is what Train needs of the built-in trainer: one optimiser step
// accumulated over microbatches (model.Trainer implements it).
type Backend interface {
	Totals(b model.Batch) (model.BatchTotals, error)
	Begin(tot model.BatchTotals) error
	Accumulate(mb model.Batch) error
	Apply() (model.StepStats, error)
	Discard()
}

var _ Backend = (*model.Trainer)(nil)

// paddingBatch is the plan's padding microbatch materialised as its
// contract says: one valid token with loss mask 0. It adds nothing to the
// gradient; running it keeps the built-in backend doing what a real DP
// rank with a collective must do.
var paddingBatch = model.Batch{Sequences: []model.Sequence{{
	Tokens: []int32{tokenizer.PAD}, LossMask: []uint8{0}, RolloutLogprobs: []float32{0},
}}}

// Train takes ONE optimiser step on a prepared mini-batch, following its
// microbatch plan: the loss is reduced over the whole mini-batch (its
// totals are computed first), each microbatch's gradient is accumulated,
// and the step is applied once. In-process DP ranks are accumulated in rank
// order, each rank's microbatches in plan order, so the result is
// deterministic; it equals one pass over the whole mini-batch up to float
// summation order. Peak memory is bounded by the largest microbatch (plus
// the backend's fixed buffers), not by the mini-batch. On error no step is
// taken and the backend is left without an open step.
func Train(be Backend, p Prepared) (model.StepStats, error) {
	tot, err := be.Totals(p.Batch)
	if err != nil {
		return model.StepStats{}, err
	}
	// token_mean_legacy averages per-microbatch token means over the
	// microbatches that hold trained tokens (padding ones hold none).
	tot.Microbatches = 0
	for _, rank := range p.Plan.Ranks {
		for _, m := range rank.Microbatches {
			for _, i := range m.Indices {
				if i >= 0 && i < len(p.Batch.Sequences) && p.Batch.Sequences[i].TrainedTokens() > 0 {
					tot.Microbatches++
					break
				}
			}
		}
	}
	if err := be.Begin(tot); err != nil {
		return model.StepStats{}, err
	}
	var mb model.Batch
	for r, rank := range p.Plan.Ranks {
		for k, m := range rank.Microbatches {
			batch := paddingBatch
			if !m.Padding {
				mb.Sequences = mb.Sequences[:0]
				for _, i := range m.Indices {
					if i < 0 || i >= len(p.Batch.Sequences) {
						be.Discard()
						return model.StepStats{}, fmt.Errorf("trainer: rank %d microbatch %d: index %d outside the mini-batch of %d", r, k, i, len(p.Batch.Sequences))
					}
					mb.Sequences = append(mb.Sequences, p.Batch.Sequences[i])
				}
				batch = mb
			}
			if err := be.Accumulate(batch); err != nil {
				be.Discard()
				return model.StepStats{}, fmt.Errorf("trainer: rank %d microbatch %d: %w", r, k, err)
			}
		}
	}
	st, err := be.Apply()
	if err != nil {
		be.Discard()
		return model.StepStats{}, fmt.Errorf("trainer: apply: %w", err)
	}
	return st, nil
}
