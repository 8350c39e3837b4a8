package engine

import (
	"encoding/json"
	"net/http"
	"strings"
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
	gen, rerr := e.chatGeneration(&req)
	if rerr != nil {
		writeReqError(w, rerr)
		return
	}
	e.generate(w, r, chatEndpoint, gen)
}

func (e *Engine) chatGeneration(req *ChatRequest) (generation, *reqError) {
	maxTok := req.MaxTokens
	if req.MaxCompletionTokens != nil {
		maxTok = req.MaxCompletionTokens
	}
	lora, model, sp, rerr := e.samplingFor(req.Model, &req.SamplingOptions, maxTok)
	if rerr != nil {
		return generation{}, rerr
	}
	if req.Logprobs {
		sp.nTop = 0
		if req.TopLogprobs != nil {
			if *req.TopLogprobs < 0 || *req.TopLogprobs > model.VocabSize() {
				return generation{}, badRequest("top_logprobs", "top_logprobs must be in [0, %d], got %d", model.VocabSize(), *req.TopLogprobs)
			}
			sp.nTop = *req.TopLogprobs
		}
	}
	if len(req.Messages) == 0 {
		return generation{}, badRequest("messages", "messages must not be empty")
	}
	prompt, rerr := e.textCodec().chatPrompt(req, e.cfg.AddBOS)
	if rerr != nil {
		return generation{}, rerr
	}
	if rerr := checkTextIDs(prompt, model.VocabSize()); rerr != nil {
		return generation{}, rerr
	}
	if rerr := checkRouteStart(sp, [][]int32{prompt}); rerr != nil {
		return generation{}, rerr
	}
	return newGeneration(req.Model, &req.SamplingOptions, lora, model, [][]int32{prompt}, sp, 0), nil
}

// chatEndpoint renders /v1/chat/completions: a "chat.completion" body, or
// "chat.completion.chunk"s whose first delta per choice names the role.
var chatEndpoint = endpoint{
	idPrefix: "chatcmpl-",
	greet:    true,
	whole: func(h respHead, g *group, sp sampling, current int64) any {
		resp := ChatResponse{ID: h.id, Object: "chat.completion", Created: h.created, Model: h.model, Usage: usageOf(g, sp.n)}
		for _, s := range g.seqs {
			c := chatChoice(s, sp, 0, len(s.out), true, current)
			c.Message = &ChatResponseMessage{Role: "assistant", Content: textOf(s.text)}
			c.RoutedExperts = s.routedExperts()
			resp.Choices = append(resp.Choices, c)
		}
		return resp
	},
	chunk: func(h respHead, s *seqState, sp sampling, c cursor, vis int, first bool, current int64) any {
		ch := chatChoice(s, sp, c.tok, len(s.out), first, current)
		ch.Delta = &ChatResponseMessage{Content: textOf(s.text[c.text:vis])}
		if first {
			ch.Delta.Role = "assistant"
		}
		return ChatResponse{ID: h.id, Object: "chat.completion.chunk", Created: h.created, Model: h.model, Choices: []ChatChoice{ch}}
	},
	usage: func(h respHead, u *Usage) any {
		return ChatResponse{ID: h.id, Object: "chat.completion.chunk", Created: h.created, Model: h.model, Choices: []ChatChoice{}, Usage: u}
	},
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
			t := sp.logprobToken(s.out[i])
			entry := ChatTokenLogprob{Token: t, Logprob: s.lps[i], Bytes: bytesOf(t), TopLogprobs: []ChatTopLogprob{}}
			for _, alt := range s.top[i] {
				at := sp.logprobToken(alt.id)
				entry.TopLogprobs = append(entry.TopLogprobs, ChatTopLogprob{Token: at, Logprob: alt.lp, Bytes: bytesOf(at)})
			}
			lp.Content = append(lp.Content, entry)
		}
		c.Logprobs = lp
	}
	return c
}
