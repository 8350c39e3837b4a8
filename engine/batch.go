package engine

import (
	"fmt"
	"slices"
)

// BatchModel is a Model with a per-sequence KV cache and a batched forward
// pass (model/transformer's models). When the served model implements
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

// isEOS reports whether tok ends a sequence served by m: the model's own
// EOS ids (generation_config.json) when it has them, else the text codec's
// (the tokenizer's EOS, or the character tokenizer's).
func isEOS(m Model, tok int32, c textCodec) bool {
	if em, ok := m.(EOSModel); ok {
		return slices.Contains(em.EOSIDs(), tok)
	}
	return c.isEOS(tok)
}

// batchJobs runs one Forward per BatchModel over its jobs' sequences and
// leaves each job's logits in j.pre; jobs of other models are left
// alone. A cache built by another model than the job's is dropped and the
// sequence prefilled again. A Forward error aborts that model's jobs. The
// per-step slices are the engine's, reused (no allocation per step).
func (e *Engine) batchJobs(jobs []job) {
	b := &e.batch
	b.models = b.models[:0]
	for i := range jobs {
		if bm, ok := jobs[i].m.(BatchModel); ok && !slices.Contains(b.models, bm) {
			b.models = append(b.models, bm)
		}
	}
	for len(e.logitBufs) < len(jobs) {
		e.logitBufs = append(e.logitBufs, nil)
	}
	for _, bm := range b.models {
		b.idx, b.seqs, b.toks, b.outs = b.idx[:0], b.seqs[:0], b.toks[:0], b.outs[:0]
		v := bm.VocabSize()
		for i := range jobs {
			if jobs[i].m != Model(bm) {
				continue
			}
			s := jobs[i].s
			if s.kv == nil || s.kvModel != bm || s.kv.Len() >= len(s.all) {
				s.kv, s.kvModel = bm.NewSeq(), bm
			}
			if cap(e.logitBufs[i]) < v {
				e.logitBufs[i] = make([]float32, v)
			}
			b.idx = append(b.idx, i)
			b.seqs = append(b.seqs, s.kv)
			b.toks = append(b.toks, s.all[s.kv.Len():])
			b.outs = append(b.outs, e.logitBufs[i][:v])
		}
		if err := bm.Forward(b.seqs, b.toks, b.outs); err != nil {
			e.log.Warn().Err(err).Msg("batched forward failed; aborting its sequences")
			for _, i := range b.idx {
				jobs[i].err = fmt.Errorf("engine: forward: %w", err)
			}
			continue
		}
		for n, i := range b.idx {
			jobs[i].pre = b.outs[n]
		}
	}
	clear(b.models[:cap(b.models)]) // drop references to old models and finished caches
	clear(b.seqs[:cap(b.seqs)])
	clear(b.toks[:cap(b.toks)])
	clear(b.outs[:cap(b.outs)])
}

// batchState is batchJobs' reusable per-step memory.
type batchState struct {
	models []BatchModel
	idx    []int
	seqs   []SeqCache
	toks   [][]int32
	outs   [][]float32
}
