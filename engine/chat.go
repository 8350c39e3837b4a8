package engine

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/asyncrl/asyncrl/policy/tokenizer"
)

// renderChat is the chat template: every message becomes
// "<|role|>" + content, and "<|assistant|>" cues the reply. The character
// tokenizer has no special chat tokens, so the markers are plain text.
func renderChat(msgs []ChatMessage) (string, *reqError) {
	var b strings.Builder
	for i, m := range msgs {
		if m.Role == "" {
			return "", badRequest("messages", "messages[%d].role is required", i)
		}
		text, ok := messageText(m.Content)
		if !ok {
			return "", badRequest("messages", "messages[%d].content must be a string or a list of text parts", i)
		}
		b.WriteString("<|" + m.Role + "|>")
		b.WriteString(text)
	}
	b.WriteString("<|assistant|>")
	return b.String(), nil
}

func messageText(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", true
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return "", false
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return "", false
		}
		b.WriteString(p.Text)
	}
	return b.String(), true
}

func (e *Engine) handleChat(w http.ResponseWriter, r *http.Request) {
	var req ChatRequest
	if !decodeBody(w, r, &req) {
		return
	}
	lora, model, rerr := e.resolveModel(req.Model)
	if rerr != nil {
		writeReqError(w, rerr)
		return
	}
	maxTok := req.MaxTokens
	if req.MaxCompletionTokens != nil {
		maxTok = req.MaxCompletionTokens
	}
	sp, rerr := parseSampling(samplingFields{
		temperature: req.Temperature, topP: req.TopP, minP: req.MinP, topK: req.TopK,
		n: req.N, maxTokens: maxTok, seed: req.Seed, stop: req.Stop,
	})
	if rerr != nil {
		writeReqError(w, rerr)
		return
	}
	if req.Logprobs {
		sp.nTop = 0
		if req.TopLogprobs != nil {
			if *req.TopLogprobs < 0 || *req.TopLogprobs > model.VocabSize() {
				writeReqError(w, badRequest("top_logprobs", "top_logprobs must be in [0, %d], got %d", model.VocabSize(), *req.TopLogprobs))
				return
			}
			sp.nTop = *req.TopLogprobs
		}
	}
	sp.ignoreEOS, sp.returnIDs = req.IgnoreEOS, req.ReturnTokenIDs
	if len(req.Messages) == 0 {
		writeReqError(w, badRequest("messages", "messages must not be empty"))
		return
	}
	text, rerr := renderChat(req.Messages)
	if rerr != nil {
		writeReqError(w, rerr)
		return
	}
	prompt := tokenizer.Encode(text)
	if e.cfg.AddBOS {
		prompt = append([]int32{tokenizer.BOS}, prompt...)
	}
	id := requestID(r, req.RequestID, "chatcmpl-")
	g, rerr := e.buildGroup(id, lora, model, [][]int32{prompt}, sp, 0)
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
		e.streamChat(w, r, g, sp, name, created, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
		return
	}
	if !e.waitDone(r, g) {
		return
	}
	e.mu.Lock()
	resp := ChatResponse{ID: g.id, Object: "chat.completion", Created: created, Model: name, Usage: usageOf(g, sp.n)}
	for _, s := range g.seqs {
		c := chatChoice(s, sp, 0, len(s.out), true, e.version)
		c.Message = &ChatResponseMessage{Role: "assistant", Content: string(s.text)}
		resp.Choices = append(resp.Choices, c)
	}
	v := lastVersion(g, e.version)
	e.mu.Unlock()
	w.Header().Set("X-Weight-Version", strconv.FormatInt(v, 10))
	writeJSON(w, http.StatusOK, resp)
}

func bytesOf(s string) []int {
	out := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		out[i] = int(s[i])
	}
	return out
}

func chatChoice(s *seqState, sp sampling, a, b int, first bool, current int64) ChatChoice {
	c := ChatChoice{Index: s.index, FinishReason: s.finishPtr(), Extensions: s.extensions(a, b, current)}
	if sp.returnIDs {
		c.TokenIDs = append([]int32{}, s.out[a:b]...)
		if first {
			c.PromptTokenIDs = s.prompt
		}
	}
	if sp.nTop >= 0 {
		lp := &ChatLogprobs{Content: []ChatTokenLogprob{}}
		for i := a; i < b; i++ {
			t := tokenText(s.out[i])
			entry := ChatTokenLogprob{Token: t, Logprob: s.lps[i], Bytes: bytesOf(t), TopLogprobs: []ChatTopLogprob{}}
			for _, alt := range s.top[i] {
				at := tokenText(alt.id)
				entry.TopLogprobs = append(entry.TopLogprobs, ChatTopLogprob{Token: at, Logprob: alt.lp, Bytes: bytesOf(at)})
			}
			lp.Content = append(lp.Content, entry)
		}
		c.Logprobs = lp
	}
	return c
}

func (e *Engine) streamChat(w http.ResponseWriter, r *http.Request, g *group, sp sampling, name string, created int64, usage bool) {
	out := newSSE(w, e.currentVersion())
	curs := make([]cursor, len(g.seqs))
	started := make([]bool, len(g.seqs))
	ok := e.stream(r, out, g, func(current int64) ([]any, bool) {
		var chunks []any
		all := true
		for i, s := range g.seqs {
			c := &curs[i]
			if c.done {
				continue
			}
			vis := max(visibleLocked(s), c.text)
			if started[i] && len(s.out) == c.tok && vis == c.text && s.finish == "" {
				all = false
				continue
			}
			ch := chatChoice(s, sp, c.tok, len(s.out), !started[i], current)
			ch.Delta = &ChatResponseMessage{Content: string(s.text[c.text:vis])}
			if !started[i] {
				ch.Delta.Role = "assistant"
				started[i] = true
			}
			c.tok, c.text = len(s.out), vis
			if s.finish != "" {
				c.done = true
			} else {
				all = false
			}
			chunks = append(chunks, ChatResponse{ID: g.id, Object: "chat.completion.chunk", Created: created, Model: name, Choices: []ChatChoice{ch}})
		}
		if all && usage {
			chunks = append(chunks, ChatResponse{ID: g.id, Object: "chat.completion.chunk", Created: created, Model: name, Choices: []ChatChoice{}, Usage: usageOf(g, sp.n)})
		}
		return chunks, all
	})
	if ok {
		out.done()
	}
}
