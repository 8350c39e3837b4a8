package engine

import (
	"net/http"
	"strconv"
	"time"
)

// generation is a validated request of either generation endpoint, ready
// to become a group. The endpoints differ only in how they decode and
// validate a body (into this) and in how they render results (endpoint).
type generation struct {
	requestID  string // from the body; empty falls back to the header, then a counter
	model      string // as the client named it; empty means the served name
	lora       string
	m          Model
	prompts    [][]int32
	sp         sampling
	defaultMax int // max_tokens when the body gives none (0: the model's room)
	stream     bool
	usage      bool // stream_options.include_usage
}

// respHead is what every response and chunk of one request repeats.
type respHead struct {
	id, model string
	created   int64
}

// endpoint renders one API's responses. Its functions run with e.mu held
// and are given the engine's current weight version.
type endpoint struct {
	idPrefix string
	// greet: each sequence's first stream chunk is sent even when it
	// carries nothing new (chat opens every choice with a role delta).
	greet bool
	// whole is the non-streamed body once g is done.
	whole func(h respHead, g *group, sp sampling, current int64) any
	// chunk is the stream chunk for s's tokens from c.tok and text
	// [c.text, vis); first is true for s's first chunk.
	chunk func(h respHead, s *seqState, sp sampling, c cursor, vis int, first bool, current int64) any
	// usage is the final stream chunk with include_usage.
	usage func(h respHead, u *Usage) any
}

// samplingFor resolves the model and parses the shared sampling options,
// the first validation steps of both endpoints, in the order vLLM reports
// their errors. maxTokens is the endpoint's effective max_tokens.
func (e *Engine) samplingFor(model string, o *SamplingOptions, maxTokens *int) (string, Model, sampling, *reqError) {
	lora, m, rerr := e.resolveModel(model)
	if rerr != nil {
		return "", nil, sampling{}, rerr
	}
	sp, rerr := parseSampling(samplingFields{
		temperature: o.Temperature, topP: o.TopP, minP: o.MinP, topK: o.TopK,
		n: o.N, maxTokens: maxTokens, seed: o.Seed, stop: o.Stop,
	})
	if rerr != nil {
		return "", nil, sampling{}, rerr
	}
	sp.ignoreEOS, sp.returnIDs, sp.tokIDs = o.IgnoreEOS, o.ReturnTokenIDs, o.ReturnTokensAsTokenIDs
	sp.codec = e.textCodec()
	if rerr := routeOptions(o, m, &sp); rerr != nil {
		return "", nil, sampling{}, rerr
	}
	return lora, m, sp, nil
}

// newGeneration assembles a validated request from the shared options.
func newGeneration(model string, o *SamplingOptions, lora string, m Model, prompts [][]int32, sp sampling, defaultMax int) generation {
	return generation{
		requestID: o.RequestID, model: model, lora: lora, m: m, prompts: prompts, sp: sp, defaultMax: defaultMax,
		stream: o.Stream, usage: o.StreamOptions != nil && o.StreamOptions.IncludeUsage,
	}
}

// generate submits gen and answers the client: one JSON body, or an SSE
// stream of chunks, rendered by ep.
func (e *Engine) generate(w http.ResponseWriter, r *http.Request, ep endpoint, gen generation) {
	id := requestID(r, gen.requestID, ep.idPrefix)
	g, rerr := e.buildGroup(id, gen.lora, gen.m, gen.prompts, gen.sp, gen.defaultMax)
	if rerr != nil {
		writeReqError(w, rerr)
		return
	}
	if !e.start(w, g) {
		return
	}
	h := respHead{id: g.id, model: gen.model, created: time.Now().Unix()}
	if h.model == "" {
		h.model = e.cfg.ServedModelName
	}
	if gen.stream {
		e.streamGroup(w, r, ep, h, g, gen.sp, gen.usage)
		return
	}
	if !e.waitDone(r, g) {
		return
	}
	e.mu.Lock()
	resp := ep.whole(h, g, gen.sp, e.version)
	v := lastVersion(g, e.version)
	e.mu.Unlock()
	w.Header().Set("X-Weight-Version", strconv.FormatInt(v, 10))
	writeJSON(w, http.StatusOK, resp)
}

// streamGroup sends g as SSE chunks: per sequence a cursor over tokens and
// visible text advances, and each poll sends a chunk for what is new.
func (e *Engine) streamGroup(w http.ResponseWriter, r *http.Request, ep endpoint, h respHead, g *group, sp sampling, usage bool) {
	out := newSSE(w, e.currentVersion())
	curs := make([]cursor, len(g.seqs))
	sent := make([]bool, len(g.seqs))
	ok := e.stream(r, out, g, func(current int64) ([]any, bool) {
		var chunks []any
		all := true
		for i, s := range g.seqs {
			c := &curs[i]
			if c.done {
				continue
			}
			vis := max(visibleLocked(s), c.text)
			if (sent[i] || !ep.greet) && len(s.out) == c.tok && vis == c.text && s.finish == "" {
				all = false
				continue
			}
			chunks = append(chunks, ep.chunk(h, s, sp, *c, vis, !sent[i], current))
			sent[i] = true
			c.tok, c.text = len(s.out), vis
			if s.finish != "" {
				c.done = true
			} else {
				all = false
			}
		}
		if all && usage {
			chunks = append(chunks, ep.usage(h, usageOf(g, sp.n)))
		}
		return chunks, all
	})
	if ok {
		out.done()
	}
}
