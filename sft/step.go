package sft

import (
	"errors"
	"fmt"

	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/sft/data"
)

// ErrExample is wrapped by errors about an example the model cannot train
// on (too long, a token outside the vocabulary); the message names the
// dataset, shard and row.
var ErrExample = errors.New("sft: bad example")

// Step is one assembled optimiser step: pure data, no I/O.
type Step struct {
	// Batch holds one cross-entropy Sequence per example, in draw order.
	Batch model.Batch
	// Micro is the microbatch plan: one entry per packed bin, the indices
	// of its examples in Batch.Sequences; an empty entry is a padding bin
	// (the bin count is a multiple of the DP size).
	Micro [][]int
	// IDs are the examples' ids, per sequence.
	IDs []data.ExampleID
	// Tokens counts every token of the step's examples, Trained those
	// under the loss mask, PaddingTokens the bins' padding.
	Tokens, Trained, PaddingTokens int
}

// Limits are what the model accepts.
type Limits struct {
	VocabSize, MaxSeqLen int
	// Names are the datasets' names (by ExampleID.Dataset) for messages.
	Names []string
}

// name is a readable example id: dataset name, shard and row.
func (l Limits) name(id data.ExampleID) string {
	ds := fmt.Sprintf("dataset %d", id.Dataset)
	if int(id.Dataset) < len(l.Names) && l.Names[id.Dataset] != "" {
		ds = fmt.Sprintf("dataset %q", l.Names[id.Dataset])
	}
	return fmt.Sprintf("%s shard %d row %d", ds, id.Shard, id.Row)
}

// Check refuses an example the model cannot train on.
func (l Limits) Check(ex data.Example) error {
	switch {
	case len(ex.Tokens) == 0:
		return fmt.Errorf("%w: %s: no tokens", ErrExample, l.name(ex.ID))
	case len(ex.Tokens) > l.MaxSeqLen:
		return fmt.Errorf("%w: %s: %d tokens, more than the model's max_seq_len %d (set sft.data.max_len to truncate)", ErrExample, l.name(ex.ID), len(ex.Tokens), l.MaxSeqLen)
	case ex.LossMask != nil && len(ex.LossMask) != len(ex.Tokens):
		return fmt.Errorf("%w: %s: %d loss-mask entries for %d tokens", ErrExample, l.name(ex.ID), len(ex.LossMask), len(ex.Tokens))
	}
	for i, t := range ex.Tokens {
		if t < 0 || int(t) >= l.VocabSize {
			return fmt.Errorf("%w: %s token %d: id %d outside the model's vocabulary [0, %d)", ErrExample, l.name(ex.ID), i, t, l.VocabSize)
		}
	}
	return nil
}

// LossMask is the mask an example trains with: its own, or every token
// after the first when it has none; the first token is never trained
// (nothing predicts it).
func LossMask(ex data.Example) []uint8 {
	m := make([]uint8, len(ex.Tokens))
	for i := 1; i < len(m); i++ {
		m[i] = 1
		if ex.LossMask != nil && ex.LossMask[i] == 0 {
			m[i] = 0
		}
	}
	return m
}

// Assemble makes a Step of a step's examples and the bins data.Pack made
// of them: every example must be in exactly one bin (a bin lists an
// example by its id; an id drawn twice in a step is in two bins' lists
// or twice in one).
func Assemble(examples []data.Example, bins []data.Bin) (Step, error) {
	st := Step{Batch: model.Batch{Loss: model.LossCrossEntropy, Sequences: make([]model.Sequence, len(examples))},
		IDs: make([]data.ExampleID, len(examples))}
	free := make(map[data.ExampleID][]int, len(examples)) // id → indices not yet in a bin
	for i, ex := range examples {
		mask := LossMask(ex)
		st.Batch.Sequences[i] = model.Sequence{Tokens: ex.Tokens, LossMask: mask,
			Group: fmt.Sprintf("%d/%d/%d", ex.ID.Dataset, ex.ID.Shard, ex.ID.Row)}
		st.IDs[i] = ex.ID
		st.Tokens += len(ex.Tokens)
		st.Trained += st.Batch.Sequences[i].TrainedTokens()
		free[ex.ID] = append(free[ex.ID], i)
	}
	st.Micro = make([][]int, len(bins))
	placed := 0
	for b, bin := range bins {
		st.Micro[b] = []int{}
		used := 0
		for _, id := range bin.IDs {
			q := free[id]
			if len(q) == 0 {
				return Step{}, fmt.Errorf("sft: packing: bin %d holds example %v, which is not (or no longer) in the step", b, id)
			}
			i := q[0]
			free[id] = q[1:]
			st.Micro[b] = append(st.Micro[b], i)
			used += len(examples[i].Tokens)
			placed++
		}
		if len(bin.Tokens) > used {
			st.PaddingTokens += len(bin.Tokens) - used
		}
	}
	if placed != len(examples) {
		return Step{}, fmt.Errorf("sft: packing: bins hold %d of the step's %d examples", placed, len(examples))
	}
	return st, nil
}
