package engine

import (
	"net/http"
	"strconv"
	"time"

	"github.com/asyncrl/asyncrl/policy/tokenizer"
)

func (e *Engine) handleCompletions(w http.ResponseWriter, r *http.Request) {
	var req CompletionRequest
	if !decodeBody(w, r, &req) {
		return
	}
	lora, model, rerr := e.resolveModel(req.Model)
	if rerr != nil {
		writeReqError(w, rerr)
		return
	}
	sp, rerr := parseSampling(samplingFields{
		temperature: req.Temperature, topP: req.TopP, minP: req.MinP, topK: req.TopK,
		n: req.N, maxTokens: req.MaxTokens, seed: req.Seed, stop: req.Stop,
	})
	if rerr != nil {
		writeReqError(w, rerr)
		return
	}
	if req.Logprobs != nil {
		if *req.Logprobs < 0 || *req.Logprobs > model.VocabSize() {
			writeReqError(w, badRequest("logprobs", "logprobs must be in [0, %d], got %d", model.VocabSize(), *req.Logprobs))
			return
		}
		sp.nTop = *req.Logprobs
	}
	sp.ignoreEOS, sp.returnIDs = req.IgnoreEOS, req.ReturnTokenIDs
	prompts, rerr := e.parsePrompt(req.Prompt, model.VocabSize())
	if rerr != nil {
		writeReqError(w, rerr)
		return
	}
	id := requestID(r, req.RequestID, "cmpl-")
	g, rerr := e.buildGroup(id, lora, model, prompts, sp, e.cfg.DefaultMaxTokens)
	if rerr != nil {
		writeReqError(w, rerr)
		return
	}
	if !e.start(w, g) {
		return
	}
	name := req.Model
	if name == "" {
		name = e.cfg.ServedModelName
	}
	created := time.Now().Unix()
	if req.Stream {
		e.streamCompletion(w, r, g, sp, name, created, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
		return
	}
	if !e.waitDone(r, g) {
		return
	}
	e.mu.Lock()
	resp := CompletionResponse{ID: g.id, Object: "text_completion", Created: created, Model: name, Usage: usageOf(g, sp.n)}
	for _, s := range g.seqs {
		resp.Choices = append(resp.Choices, completionChoice(s, sp, 0, len(s.out), 0, len(s.text), true, e.version))
	}
	v := lastVersion(g, e.version)
	e.mu.Unlock()
	w.Header().Set("X-Weight-Version", strconv.FormatInt(v, 10))
	writeJSON(w, http.StatusOK, resp)
}

// completionChoice renders tokens [a,b) and text [ta,tb) of s.
func completionChoice(s *seqState, sp sampling, a, b, ta, tb int, first bool, current int64) CompletionChoice {
	c := CompletionChoice{Index: s.index, Text: string(s.text[ta:tb]), FinishReason: s.finishPtr(), Extensions: s.extensions(a, b, current)}
	if sp.returnIDs {
		c.TokenIDs = append([]int32{}, s.out[a:b]...)
		if first {
			c.PromptTokenIDs = s.prompt
		}
	}
	if sp.nTop >= 0 {
		lp := &CompletionLogprobs{Tokens: []string{}, TokenLogprobs: []float32{}, TopLogprobs: []map[string]float32{}, TextOffset: []int{}}
		off := 0
		for i := 0; i < a; i++ {
			off += len(tokenizer.Piece(s.out[i]))
		}
		for i := a; i < b; i++ {
			tok := s.out[i]
			lp.Tokens = append(lp.Tokens, tokenText(tok))
			lp.TokenLogprobs = append(lp.TokenLogprobs, s.lps[i])
			top := make(map[string]float32, len(s.top[i])+1)
			for _, t := range s.top[i] {
				top[tokenText(t.id)] = t.lp
			}
			top[tokenText(tok)] = s.lps[i] // vLLM always lists the sampled token
			lp.TopLogprobs = append(lp.TopLogprobs, top)
			lp.TextOffset = append(lp.TextOffset, off)
			off += len(tokenizer.Piece(tok))
		}
		c.Logprobs = lp
	}
	return c
}

func (e *Engine) streamCompletion(w http.ResponseWriter, r *http.Request, g *group, sp sampling, name string, created int64, usage bool) {
	out := newSSE(w, e.currentVersion())
	curs := make([]cursor, len(g.seqs))
	first := make([]bool, len(g.seqs))
	for i := range first {
		first[i] = true
	}
	ok := e.stream(r, out, g, func(current int64) ([]any, bool) {
		var chunks []any
		all := true
		for i, s := range g.seqs {
			c := &curs[i]
			if c.done {
				continue
			}
			vis := max(visibleLocked(s), c.text)
			if len(s.out) == c.tok && vis == c.text && s.finish == "" {
				all = false
				continue
			}
			ch := completionChoice(s, sp, c.tok, len(s.out), c.text, vis, first[i], current)
			first[i] = false
			c.tok, c.text = len(s.out), vis
			if s.finish != "" {
				c.done = true
			} else {
				all = false
			}
			chunks = append(chunks, CompletionResponse{ID: g.id, Object: "text_completion", Created: created, Model: name, Choices: []CompletionChoice{ch}})
		}
		if all && usage {
			chunks = append(chunks, CompletionResponse{ID: g.id, Object: "text_completion", Created: created, Model: name, Choices: []CompletionChoice{}, Usage: usageOf(g, sp.n)})
		}
		return chunks, all
	})
	if ok {
		out.done()
	}
}
