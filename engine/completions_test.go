package engine

import (
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/model/sampler"
	"github.com/asyncrl/asyncrl/model/tokenizer"
)

func TestCompletionShapeAndLogprobs(t *testing.T) {
	for _, temp := range []float64{1, 0.7, 0} {
		h := newHarness(t, testConfig())
		code, hdr, body := h.post("/v1/completions", map[string]any{
			"model": "asyncrl-policy", "prompt": "hello", "max_tokens": 12, "temperature": temp,
			"logprobs": 3, "seed": 7, "ignore_eos": true, "return_token_ids": true,
		})
		if code != http.StatusOK {
			t.Fatalf("T=%v: %d %s", temp, code, body)
		}
		var r CompletionResponse
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatal(err)
		}
		if r.Object != "text_completion" || !strings.HasPrefix(r.ID, "cmpl-") || r.Model != "asyncrl-policy" || r.Created == 0 {
			t.Fatalf("envelope %+v", r)
		}
		if hdr.Get("X-Weight-Version") != "0" {
			t.Fatalf("X-Weight-Version = %q", hdr.Get("X-Weight-Version"))
		}
		if len(r.Choices) != 1 {
			t.Fatalf("choices %d", len(r.Choices))
		}
		c := r.Choices[0]
		wantPrompt := append([]int32{tokenizer.BOS}, tokenizer.Encode("hello")...)
		if !slices.Equal(c.PromptTokenIDs, wantPrompt) || len(c.TokenIDs) != 12 || *c.FinishReason != "length" {
			t.Fatalf("choice ids/finish: %+v", c)
		}
		if c.Text != tokenizer.Decode(c.TokenIDs) {
			t.Fatalf("text %q != decode(token_ids) %q", c.Text, tokenizer.Decode(c.TokenIDs))
		}
		lp := c.Logprobs
		if lp == nil || len(lp.Tokens) != 12 || len(lp.TokenLogprobs) != 12 || len(lp.TopLogprobs) != 12 || len(lp.TextOffset) != 12 {
			t.Fatalf("logprobs shape %+v", lp)
		}
		if len(c.TokenWeightVersions) != 12 || len(c.OutputLogprobs) != 12 || c.WeightVersion != 0 || c.SampleSupport != nil {
			t.Fatalf("extensions %+v", c.Extensions)
		}
		// Every generated token's logprob equals an independent log-softmax
		// of the model's logits (over logits/T; T=1 for greedy).
		ctx := append([]int32{}, c.PromptTokenIDs...)
		logits := make([]float32, h.m.VocabSize())
		for i, tok := range c.TokenIDs {
			h.m.NextLogits(ctx, logits)
			ref := refLogSoftmax(logits, temp)
			if d := math.Abs(float64(lp.TokenLogprobs[i]) - ref[tok]); d > 1e-5 {
				t.Fatalf("T=%v token %d: logprob %v, reference %v", temp, i, lp.TokenLogprobs[i], ref[tok])
			}
			if lp.TokenLogprobs[i] != c.OutputLogprobs[i] {
				t.Fatalf("output_logprobs[%d] %v != logprobs %v", i, c.OutputLogprobs[i], lp.TokenLogprobs[i])
			}
			if len(lp.TopLogprobs[i]) < 3 || len(lp.TopLogprobs[i]) > 4 {
				t.Fatalf("top_logprobs[%d] has %d entries", i, len(lp.TopLogprobs[i]))
			}
			best := slices.Max(ref)
			found := false
			for _, v := range lp.TopLogprobs[i] {
				if math.Abs(float64(v)-best) < 1e-5 {
					found = true
				}
			}
			if !found {
				t.Fatalf("top_logprobs[%d] lacks the argmax %v: %v", i, best, lp.TopLogprobs[i])
			}
			if temp == 0 && ref[tok] != best {
				t.Fatalf("greedy picked a non-argmax token at %d", i)
			}
			if lp.Tokens[i] != tokenText(tok) {
				t.Fatalf("tokens[%d] = %q", i, lp.Tokens[i])
			}
			ctx = append(ctx, tok)
		}
		if u := r.Usage; u == nil || u.PromptTokens != 6 || u.CompletionTokens != 12 || u.TotalTokens != 18 || u.PromptTokensDetails == nil {
			t.Fatalf("usage %+v", r.Usage)
		}
	}
}

func TestSampleSupportIffFilter(t *testing.T) {
	h := newHarness(t, testConfig())
	cases := []struct {
		name   string
		fields map[string]any
		want   bool
		maxLen int
	}{
		{"plain", map[string]any{}, false, 0},
		{"top_k", map[string]any{"top_k": 5}, true, 5},
		{"top_k+T0.7", map[string]any{"top_k": 5, "temperature": 0.7}, true, 5},
		{"top_p", map[string]any{"top_p": 0.5}, true, 98},
		{"min_p", map[string]any{"min_p": 0.2}, true, 98},
		{"top_k_off", map[string]any{"top_k": -1}, false, 0},
	}
	for _, tc := range cases {
		body := map[string]any{"prompt": "abc", "max_tokens": 10, "ignore_eos": true, "return_token_ids": true, "seed": 3}
		for k, v := range tc.fields {
			body[k] = v
		}
		code, _, raw := h.post("/v1/completions", body)
		if code != 200 {
			t.Fatalf("%s: %d %s", tc.name, code, raw)
		}
		var probe struct {
			Choices []map[string]json.RawMessage `json:"choices"`
		}
		json.Unmarshal(raw, &probe)
		_, present := probe.Choices[0]["sample_support"]
		_, presentLP := probe.Choices[0]["output_support_logprobs"]
		if present != tc.want || presentLP != tc.want {
			t.Fatalf("%s: sample_support present=%v, output_support_logprobs present=%v, want %v", tc.name, present, presentLP, tc.want)
		}
		if !tc.want {
			continue
		}
		var r CompletionResponse
		json.Unmarshal(raw, &r)
		c := r.Choices[0]
		if len(c.SampleSupport) != len(c.TokenIDs) {
			t.Fatalf("%s: %d supports for %d tokens", tc.name, len(c.SampleSupport), len(c.TokenIDs))
		}
		if len(c.OutputSupportLogprobs) != len(c.TokenIDs) {
			t.Fatalf("%s: %d support logprobs for %d tokens", tc.name, len(c.OutputSupportLogprobs), len(c.TokenIDs))
		}
		ctx := slices.Clone(c.PromptTokenIDs)
		logits := make([]float32, h.m.VocabSize())
		for i, sup := range c.SampleSupport {
			if len(sup) == 0 || len(sup) > tc.maxLen || !slices.Contains(sup, c.TokenIDs[i]) {
				t.Fatalf("%s: support %v for token %d", tc.name, sup, c.TokenIDs[i])
			}
			// The same logits, support and temperature give the same value
			// a trainer replaying the sample computes.
			h.m.NextLogits(ctx, logits)
			temp := 1.0
			if v, ok := tc.fields["temperature"]; ok {
				temp = v.(float64)
			}
			want := sampler.SupportLogProb(logits, temp, sup, c.TokenIDs[i])
			got := c.OutputSupportLogprobs[i]
			if got != want || got > 0 || got < c.OutputLogprobs[i] {
				t.Fatalf("%s: token %d: support logprob %v, recomputed %v, full-vocabulary %v", tc.name, i, got, want, c.OutputLogprobs[i])
			}
			ctx = append(ctx, c.TokenIDs[i])
		}
	}
}

// TestStreamedSupportLogprobs: streamed chunks carry each chunk's tokens'
// support sets and support logprobs, and together they equal the
// non-streamed answer of the same seeded request.
func TestStreamedSupportLogprobs(t *testing.T) {
	h := newHarness(t, testConfig())
	req := map[string]any{"prompt": "abc", "max_tokens": 10, "ignore_eos": true, "return_token_ids": true, "seed": 3, "top_k": 5}
	want := h.complete(req).Choices[0]
	req["stream"] = true
	_, _, body := h.post("/v1/completions", req)
	var sup [][]int32
	var slp []float32
	for _, ev := range sseEvents(t, body) {
		if ev == "[DONE]" {
			break
		}
		var ch CompletionResponse
		if err := json.Unmarshal([]byte(ev), &ch); err != nil {
			t.Fatal(err)
		}
		for _, c := range ch.Choices {
			if len(c.SampleSupport) != len(c.OutputSupportLogprobs) || len(c.OutputSupportLogprobs) != len(c.TokenIDs) {
				t.Fatalf("chunk with %d tokens, %d support rows, %d support logprobs", len(c.TokenIDs), len(c.SampleSupport), len(c.OutputSupportLogprobs))
			}
			sup = append(sup, c.SampleSupport...)
			slp = append(slp, c.OutputSupportLogprobs...)
		}
	}
	if !slices.Equal(slp, want.OutputSupportLogprobs) || len(sup) != len(want.SampleSupport) {
		t.Fatalf("streamed support logprobs %v, non-streamed %v", slp, want.OutputSupportLogprobs)
	}
}

func TestSeedDeterminismAndN(t *testing.T) {
	h := newHarness(t, testConfig())
	req := map[string]any{"prompt": "seeded", "max_tokens": 16, "seed": 42, "ignore_eos": true, "return_token_ids": true, "n": 3}
	a, b := h.complete(req), h.complete(req)
	if len(a.Choices) != 3 {
		t.Fatalf("n=3 gave %d choices", len(a.Choices))
	}
	for i := range a.Choices {
		if a.Choices[i].Index != i || !slices.Equal(a.Choices[i].TokenIDs, b.Choices[i].TokenIDs) {
			t.Fatalf("choice %d differs across identical seeded requests", i)
		}
	}
	if slices.Equal(a.Choices[0].TokenIDs, a.Choices[1].TokenIDs) && slices.Equal(a.Choices[1].TokenIDs, a.Choices[2].TokenIDs) {
		t.Fatal("n samples are identical")
	}
	req["seed"] = 43
	c := h.complete(req)
	if slices.Equal(a.Choices[0].TokenIDs, c.Choices[0].TokenIDs) {
		t.Fatal("different seeds gave identical samples")
	}
	// Several prompts × n: prompt-major choice order, prompt tokens
	// counted once per prompt.
	multi := h.complete(map[string]any{"prompt": []string{"ab", "cde"}, "max_tokens": 4, "n": 2, "ignore_eos": true, "seed": 1})
	if len(multi.Choices) != 4 || multi.Usage.PromptTokens != 3+4 || multi.Usage.CompletionTokens != 16 {
		t.Fatalf("multi-prompt: %d choices, usage %+v", len(multi.Choices), multi.Usage)
	}
	ids := h.complete(map[string]any{"prompt": [][]int32{{1, 40, 41}, {1, 50}}, "max_tokens": 2, "ignore_eos": true, "return_token_ids": true})
	if len(ids.Choices) != 2 || !slices.Equal(ids.Choices[1].PromptTokenIDs, []int32{1, 50}) {
		t.Fatalf("token-id prompts: %+v", ids.Choices)
	}
}

func TestStopStrings(t *testing.T) {
	h := newHarness(t, testConfig())
	base := map[string]any{"prompt": "stop test", "max_tokens": 40, "seed": 5, "ignore_eos": true, "return_token_ids": true}
	full := h.complete(base).Choices[0].Text
	if len(full) < 12 {
		t.Fatalf("generation too short: %q", full)
	}
	stop := full[6:8]
	cut := strings.Index(full, stop)
	base["stop"] = stop
	r := h.complete(base).Choices[0]
	if r.Text != full[:cut] || *r.FinishReason != "stop" {
		t.Fatalf("with stop %q: text %q finish %s, want %q stop", stop, r.Text, *r.FinishReason, full[:cut])
	}
	if len(r.TokenIDs) != cut+len(stop) {
		t.Fatalf("token_ids keep the stop string's tokens: got %d, want %d", len(r.TokenIDs), cut+len(stop))
	}
	base["stop"] = []string{"\x01never", stop}
	if r2 := h.complete(base).Choices[0]; r2.Text != full[:cut] {
		t.Fatalf("stop list: %q", r2.Text)
	}
	// Streaming holds back a partial stop string and never shows it.
	base["stream"] = true
	_, _, body := h.post("/v1/completions", base)
	var text strings.Builder
	for _, ev := range sseEvents(t, body) {
		if ev == "[DONE]" {
			break
		}
		var ch CompletionResponse
		json.Unmarshal([]byte(ev), &ch)
		for _, c := range ch.Choices {
			text.WriteString(c.Text)
		}
	}
	if text.String() != full[:cut] {
		t.Fatalf("streamed text %q, want %q", text.String(), full[:cut])
	}
}

func TestEOSStops(t *testing.T) {
	h := newHarness(t, testConfig())
	h.m.EOSBias = 12 // make EOS the likely first token
	r := h.complete(map[string]any{"prompt": "x", "max_tokens": 50, "temperature": 0, "return_token_ids": true}).Choices[0]
	if *r.FinishReason != "stop" || r.TokenIDs[len(r.TokenIDs)-1] != tokenizer.EOS || strings.Contains(r.Text, "<") {
		t.Fatalf("EOS: %+v", r)
	}
	r = h.complete(map[string]any{"prompt": "x", "max_tokens": 5, "temperature": 0, "ignore_eos": true, "return_token_ids": true}).Choices[0]
	if *r.FinishReason != "length" || len(r.TokenIDs) != 5 {
		t.Fatalf("ignore_eos: %+v", r)
	}
}

func TestStreamingCompletions(t *testing.T) {
	h := newHarness(t, testConfig())
	req := map[string]any{"prompt": "stream me", "max_tokens": 10, "seed": 9, "ignore_eos": true, "return_token_ids": true, "logprobs": 1, "n": 2}
	want := h.complete(req)
	req["stream"] = true
	req["stream_options"] = map[string]any{"include_usage": true}
	code, hdr, body := h.post("/v1/completions", req)
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream: %d %v", code, hdr)
	}
	evs := sseEvents(t, body)
	if evs[len(evs)-1] != "[DONE]" {
		t.Fatalf("stream does not end with [DONE]: %q", evs[len(evs)-1])
	}
	text := map[int]string{}
	ids := map[int][]int32{}
	finish := map[int]string{}
	var usage *Usage
	for _, ev := range evs[:len(evs)-1] {
		var ch CompletionResponse
		if err := json.Unmarshal([]byte(ev), &ch); err != nil {
			t.Fatalf("chunk %q: %v", ev, err)
		}
		if ch.Object != "text_completion" || ch.ID != evs0ID(t, evs) {
			t.Fatalf("chunk envelope %+v", ch)
		}
		if ch.Usage != nil {
			usage = ch.Usage
		}
		for _, c := range ch.Choices {
			if _, done := finish[c.Index]; done {
				t.Fatalf("chunk after finish for choice %d", c.Index)
			}
			text[c.Index] += c.Text
			ids[c.Index] = append(ids[c.Index], c.TokenIDs...)
			if len(c.TokenWeightVersions) != len(c.TokenIDs) || (c.Logprobs != nil && len(c.Logprobs.TokenLogprobs) != len(c.TokenIDs)) {
				t.Fatalf("chunk extensions misaligned: %+v", c)
			}
			if c.FinishReason != nil {
				finish[c.Index] = *c.FinishReason
			}
		}
	}
	for i, c := range want.Choices {
		if text[i] != c.Text || !slices.Equal(ids[i], c.TokenIDs) || finish[i] != "length" {
			t.Fatalf("choice %d streamed %q/%v/%q, non-streamed %q/%v", i, text[i], ids[i], finish[i], c.Text, c.TokenIDs)
		}
	}
	if usage == nil || usage.CompletionTokens != 20 {
		t.Fatalf("usage chunk %+v", usage)
	}
}

func evs0ID(t *testing.T, evs []string) string {
	var ch CompletionResponse
	json.Unmarshal([]byte(evs[0]), &ch)
	return ch.ID
}

func TestChatCompletions(t *testing.T) {
	h := newHarness(t, testConfig())
	req := map[string]any{
		"model":      "asyncrl-policy",
		"messages":   []map[string]any{{"role": "system", "content": "be brief"}, {"role": "user", "content": []map[string]string{{"type": "text", "text": "hi"}}}},
		"max_tokens": 8, "logprobs": true, "top_logprobs": 2, "seed": 1, "ignore_eos": true, "return_token_ids": true,
	}
	code, _, body := h.post("/v1/chat/completions", req)
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	var r ChatResponse
	json.Unmarshal(body, &r)
	if r.Object != "chat.completion" || !strings.HasPrefix(r.ID, "chatcmpl-") || len(r.Choices) != 1 {
		t.Fatalf("envelope %+v", r)
	}
	c := r.Choices[0]
	wantPrompt := append([]int32{tokenizer.BOS}, tokenizer.Encode("<|system|>be brief<|user|>hi<|assistant|>")...)
	if c.Message == nil || c.Message.Role != "assistant" || c.Message.Content != tokenizer.Decode(c.TokenIDs) || !slices.Equal(c.PromptTokenIDs, wantPrompt) {
		t.Fatalf("message %+v prompt %v", c.Message, c.PromptTokenIDs)
	}
	if c.Logprobs == nil || len(c.Logprobs.Content) != 8 {
		t.Fatalf("logprobs %+v", c.Logprobs)
	}
	for i, lp := range c.Logprobs.Content {
		if lp.Token != tokenText(c.TokenIDs[i]) || len(lp.TopLogprobs) != 2 || lp.Logprob != c.OutputLogprobs[i] || len(lp.Bytes) != len(lp.Token) {
			t.Fatalf("content[%d] = %+v", i, lp)
		}
		if lp.TopLogprobs[0].Logprob < lp.TopLogprobs[1].Logprob || lp.Logprob > lp.TopLogprobs[0].Logprob+1e-6 {
			t.Fatalf("top_logprobs not sorted or below the sampled token: %+v", lp)
		}
	}
	// Streaming chat: role first, deltas concatenate to the message.
	req["stream"] = true
	_, _, body = h.post("/v1/chat/completions", req)
	evs := sseEvents(t, body)
	if evs[len(evs)-1] != "[DONE]" {
		t.Fatal("chat stream lacks [DONE]")
	}
	var content strings.Builder
	for i, ev := range evs[:len(evs)-1] {
		var ch ChatResponse
		json.Unmarshal([]byte(ev), &ch)
		if ch.Object != "chat.completion.chunk" || ch.Choices[0].Delta == nil {
			t.Fatalf("chunk %s", ev)
		}
		if (i == 0) != (ch.Choices[0].Delta.Role == "assistant") {
			t.Fatalf("role on chunk %d: %q", i, ch.Choices[0].Delta.Role)
		}
		content.WriteString(ch.Choices[0].Delta.Content)
	}
	if content.String() != c.Message.Content {
		t.Fatalf("streamed %q, want %q", content.String(), c.Message.Content)
	}
}
