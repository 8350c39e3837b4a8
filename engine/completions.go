package engine

import (
	"net/http"
)

func (e *Engine) handleCompletions(w http.ResponseWriter, r *http.Request) {
	var req CompletionRequest
	if !decodeBody(w, r, &req) {
		return
	}
	gen, rerr := e.completionGeneration(&req)
	if rerr != nil {
		writeReqError(w, rerr)
		return
	}
	e.generate(w, r, completionsEndpoint, gen)
}

func (e *Engine) completionGeneration(req *CompletionRequest) (generation, *reqError) {
	lora, model, sp, rerr := e.samplingFor(req.Model, &req.SamplingOptions, req.MaxTokens)
	if rerr != nil {
		return generation{}, rerr
	}
	if req.Logprobs != nil {
		if *req.Logprobs < 0 || *req.Logprobs > model.VocabSize() {
			return generation{}, badRequest("logprobs", "logprobs must be in [0, %d], got %d", model.VocabSize(), *req.Logprobs)
		}
		sp.nTop = *req.Logprobs
	}
	prompts, rerr := e.parsePrompt(req.Prompt, model.VocabSize())
	if rerr != nil {
		return generation{}, rerr
	}
	if rerr := checkRouteStart(sp, prompts); rerr != nil {
		return generation{}, rerr
	}
	return newGeneration(req.Model, &req.SamplingOptions, lora, model, prompts, sp, e.cfg.DefaultMaxTokens), nil
}

// completionsEndpoint renders /v1/completions: every body and chunk is a
// "text_completion".
var completionsEndpoint = endpoint{
	idPrefix: "cmpl-",
	whole: func(h respHead, g *group, sp sampling, current int64) any {
		resp := CompletionResponse{ID: h.id, Object: "text_completion", Created: h.created, Model: h.model, Usage: usageOf(g, sp.n)}
		for _, s := range g.seqs {
			c := completionChoice(s, sp, 0, len(s.out), 0, len(s.text), true, current)
			c.RoutedExperts = s.routedExperts()
			resp.Choices = append(resp.Choices, c)
		}
		return resp
	},
	chunk: func(h respHead, s *seqState, sp sampling, c cursor, vis int, first bool, current int64) any {
		ch := completionChoice(s, sp, c.tok, len(s.out), c.text, vis, first, current)
		return CompletionResponse{ID: h.id, Object: "text_completion", Created: h.created, Model: h.model, Choices: []CompletionChoice{ch}}
	},
	usage: func(h respHead, u *Usage) any {
		return CompletionResponse{ID: h.id, Object: "text_completion", Created: h.created, Model: h.model, Choices: []CompletionChoice{}, Usage: u}
	},
}

// completionChoice renders tokens [a,b) and text [ta,tb) of s.
func completionChoice(s *seqState, sp sampling, a, b, ta, tb int, first bool, current int64) CompletionChoice {
	c := CompletionChoice{Index: s.index, Text: textOf(s.text[ta:tb]), FinishReason: s.finishPtr(), Extensions: s.extensions(a, b, current)}
	if sp.returnIDs {
		c.TokenIDs = append([]int32{}, s.out[a:b]...)
		if first {
			c.PromptTokenIDs = s.prompt
		}
	}
	if sp.nTop >= 0 {
		lp := &CompletionLogprobs{Tokens: []string{}, TokenLogprobs: []float32{}, TopLogprobs: []map[string]float32{}, TextOffset: []int{}}
		off := 0
		var buf []byte
		for i := 0; i < a; i++ {
			buf = s.codec.appendText(buf[:0], s.out[i])
			off += len(buf)
		}
		for i := a; i < b; i++ {
			tok := s.out[i]
			lp.Tokens = append(lp.Tokens, sp.logprobToken(tok))
			lp.TokenLogprobs = append(lp.TokenLogprobs, s.lps[i])
			top := make(map[string]float32, len(s.top[i])+1)
			for _, t := range s.top[i] {
				top[sp.logprobToken(t.id)] = t.lp
			}
			top[sp.logprobToken(tok)] = s.lps[i] // vLLM always lists the sampled token
			lp.TopLogprobs = append(lp.TopLogprobs, top)
			lp.TextOffset = append(lp.TextOffset, off)
			buf = s.codec.appendText(buf[:0], tok)
			off += len(buf)
		}
		c.Logprobs = lp
	}
	return c
}
