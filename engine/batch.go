package engine

import (
	"fmt"
	"slices"
)

// BatchModel is a Model with a per-sequence KV cache and a batched forward
// pass (policy/transformer's models). When the served model implements
// it, the engine keeps one SeqCache per sequence and runs one Forward per
// model per step over every sequence that model serves, instead of one
// stateless NextLogits per sequence; it samples from the logits as before.
//
// A cache belongs to the model whose NewSeq built it: after a weight swap
// (SetModel, a checkpoint load, a delta) the engine discards a sequence's
// cache and prefills its tokens again on the model now serving, so every
// token is computed over keys and values of the weights that produce it.
type BatchModel interface {
	Model
	// NewSeq returns an empty cache for one sequence.
	NewSeq() SeqCache
	// Forward appends tokens[i] (at least one) to seqs[i], each built by
	// this model's NewSeq and distinct, and writes the logits of the
	// token that follows seqs[i]'s last token into logits[i]
	// (len VocabSize). The logits equal NextLogits over all of seqs[i]'s
	// tokens (up to float rounding). On error no cache changed. Forward
	// is called from one goroutine at a time per model.
	Forward(seqs []SeqCache, tokens [][]int32, logits [][]float32) error
}

// SeqCache is one sequence's state inside a BatchModel.
type SeqCache interface {
	// Len is the number of tokens the cache holds.
	Len() int
	// Routes returns the expert ids chosen at positions [from, Len()) in
	// RoutesModel.Routes's layout ([Len()−from, layers, topK], C order),
	// captured as the tokens were forwarded; nil for a dense model.
	Routes(from int) []int32
}

// EOSModel is a Model that knows its end-of-sequence token ids (a Hugging
// Face checkpoint's generation_config.json eos_token_id, else
// config.json's). The engine stops a sequence on any of them (unless
// ignore_eos) instead of the character tokenizer's EOS.
type EOSModel interface {
	Model
	EOSIDs() []int32
}

// isEOS reports whether tok ends a sequence served by m.
func isEOS(m Model, tok int32, charEOS int32) bool {
	if em, ok := m.(EOSModel); ok {
		return slices.Contains(em.EOSIDs(), tok)
	}
	return tok == charEOS
}

// batchJobs runs one Forward per BatchModel over its jobs' sequences and
// leaves each job's logits in j.logits; jobs of other models are left
// alone. A cache built by another model than the job's is dropped and the
// sequence prefilled again. A Forward error aborts that model's jobs.
func (e *Engine) batchJobs(jobs []job) {
	groups := map[BatchModel][]int{}
	var order []BatchModel
	for i := range jobs {
		bm, ok := jobs[i].m.(BatchModel)
		if !ok {
			continue
		}
		if _, seen := groups[bm]; !seen {
			order = append(order, bm)
		}
		groups[bm] = append(groups[bm], i)
	}
	for _, bm := range order {
		idx := groups[bm]
		seqs := make([]SeqCache, len(idx))
		toks := make([][]int32, len(idx))
		outs := make([][]float32, len(idx))
		v := bm.VocabSize()
		for n, i := range idx {
			s := jobs[i].s
			if s.kv == nil || s.kvModel != bm || s.kv.Len() >= len(s.all) {
				s.kv, s.kvModel = bm.NewSeq(), bm
			}
			seqs[n] = s.kv
			toks[n] = s.all[s.kv.Len():]
			for len(e.logitBufs) <= i {
				e.logitBufs = append(e.logitBufs, nil)
			}
			if cap(e.logitBufs[i]) < v {
				e.logitBufs[i] = make([]float32, v)
			}
			outs[n] = e.logitBufs[i][:v]
		}
		if err := bm.Forward(seqs, toks, outs); err != nil {
			e.log.Warn().Err(err).Msg("batched forward failed; aborting its sequences")
			for _, i := range idx {
				jobs[i].err = fmt.Errorf("engine: forward: %w", err)
			}
			continue
		}
		for n, i := range idx {
			jobs[i].pre = outs[n]
		}
	}
}
