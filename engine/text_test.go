package engine

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/asyncrl/asyncrl/internal/realtok"
	"github.com/asyncrl/asyncrl/model/chattemplate"
)

// scriptModel generates script after a prompt of promptLen tokens: the
// logit of the scripted token is 50, every other 0 (greedy picks it).
type scriptModel struct {
	vocab, promptLen int
	script           []int32
}

func (m *scriptModel) VocabSize() int { return m.vocab }
func (m *scriptModel) MaxSeqLen() int { return 4096 }
func (m *scriptModel) NextLogits(tokens []int32, out []float32) {
	clear(out)
	if k := len(tokens) - m.promptLen; k >= 0 && k < len(m.script) {
		out[m.script[k]] = 50
	}
}

var realDirs sync.Map

func realDir(t *testing.T, name string) *chattemplate.Tokenizer {
	t.Helper()
	dir := realtok.Dir(t, name)
	if tok, ok := realDirs.Load(name); ok {
		return tok.(*chattemplate.Tokenizer)
	}
	tok, err := chattemplate.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	realDirs.Store(name, tok)
	return tok
}

// byteToken is the id of the one-byte token of b (GPT-2's byte-to-unicode
// alphabet: printable Latin-1 maps to itself, the rest to 256+n).
func byteToken(t *testing.T, tok *chattemplate.Tokenizer, b byte) int32 {
	t.Helper()
	n := 0
	for c := 0; c < 256; c++ {
		printable := c >= '!' && c <= '~' || c >= 0xA1 && c <= 0xAC || c >= 0xAE && c <= 0xFF
		r := rune(c)
		if !printable {
			r = rune(256 + n)
			n++
		}
		if byte(c) == b {
			id, ok := tok.TokenID(string(r))
			if !ok {
				t.Fatalf("no byte token for %#x", b)
			}
			return id
		}
	}
	return -1
}

func hfEngine(t *testing.T, tok *chattemplate.Tokenizer, m Model) *httptest.Server {
	t.Helper()
	cfg := testConfig()
	cfg.MaxModelLen = 2048
	cfg.DefaultMaxTokens = 64
	e, err := New(cfg, m, WithTokenizer(tok))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return newTestServer(t, e)
}

func postJSON(t *testing.T, url string, body any) (int, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []byte
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			break
		}
	}
	return resp.StatusCode, out
}

// TestTokenizerCompletions: with WithTokenizer the completions endpoint
// encodes a text prompt with the HF tokenizer (Qwen3: no BOS), decodes the
// generated ids with it — special tokens skipped, a character whose three
// bytes were generated as three tokens shown whole — stops on the
// tokenizer's EOS, matches stop strings on the decoded text, names logprob
// tokens by their text, and streams chunks that are each valid UTF-8 and
// add up to the whole text.
func TestTokenizerCompletions(t *testing.T) {
	tok := realDir(t, realtok.Qwen3)
	prompt := "Say hello:"
	pids := tok.Encode(prompt)
	eos, _ := tok.TokenID("<|im_end|>")
	script := tok.Encode("Hello ")
	for _, b := range []byte("你") {
		script = append(script, byteToken(t, tok, b))
	}
	script = append(script, tok.Encode(" world")...)
	script = append(script, eos)
	m := &scriptModel{vocab: tok.VocabSize(), promptLen: len(pids), script: script}
	srv := hfEngine(t, tok, m)

	code, out := postJSON(t, srv.URL+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 50, "temperature": 0,
		"return_token_ids": true, "logprobs": 0})
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, out)
	}
	var r CompletionResponse
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	c := r.Choices[0]
	if !slices.Equal(c.PromptTokenIDs, pids) {
		t.Fatalf("prompt ids %v, want the tokenizer's %v", c.PromptTokenIDs, pids)
	}
	if !slices.Equal(c.TokenIDs, script) || *c.FinishReason != "stop" {
		t.Fatalf("ids %v finish %v, want the script ending at the EOS", c.TokenIDs, *c.FinishReason)
	}
	if c.Text != "Hello 你 world" {
		t.Fatalf("text %q", c.Text)
	}
	if c.Logprobs.Tokens[0] != "Hello" || c.Logprobs.Tokens[len(script)-1] != "<|im_end|>" || c.Logprobs.Tokens[len(tok.Encode("Hello "))] != "\ufffd" {
		t.Fatalf("logprob tokens %q", c.Logprobs.Tokens)
	}
	if off := c.Logprobs.TextOffset; off[1] != len("Hello") || off[len(off)-1] != len("Hello 你 world") {
		t.Fatalf("text offsets %v", off)
	}

	// Stop string on the decoded text, across the token that completes "你".
	code, out = postJSON(t, srv.URL+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 50, "temperature": 0, "stop": "你 w"})
	if err := json.Unmarshal(out, &r); code != http.StatusOK || err != nil || r.Choices[0].Text != "Hello " || *r.Choices[0].FinishReason != "stop" {
		t.Fatalf("stop: %d %s", code, out)
	}

	// Streamed: every chunk is valid UTF-8 with no replacement character,
	// and the chunks add up to the whole text.
	code, out = postJSON(t, srv.URL+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 50, "temperature": 0, "stream": true})
	if code != http.StatusOK {
		t.Fatalf("stream: %d %s", code, out)
	}
	var all strings.Builder
	for _, ev := range sseEvents(t, out) {
		if ev == "[DONE]" {
			continue
		}
		var ch CompletionResponse
		if err := json.Unmarshal([]byte(ev), &ch); err != nil {
			t.Fatal(err)
		}
		for _, cc := range ch.Choices {
			if !utf8.ValidString(cc.Text) || strings.ContainsRune(cc.Text, '\ufffd') {
				t.Fatalf("chunk %q splits a character", cc.Text)
			}
			all.WriteString(cc.Text)
		}
	}
	if all.String() != "Hello 你 world" {
		t.Fatalf("streamed text %q", all.String())
	}
}

// TestTokenizerBOSAndUnfinishedBytes: Llama-3.1's tokenizer adds
// <|begin_of_text|> to a text prompt (its post-processor), and a sequence
// that ends inside a character (cut by max_tokens) shows the incomplete
// bytes as one U+FFFD, as from_utf8_lossy does.
func TestTokenizerBOSAndUnfinishedBytes(t *testing.T) {
	tok := realDir(t, realtok.Llama31)
	prompt := "Hi"
	pids := append([]int32{128000}, tok.Encode(prompt)...)
	script := []int32{byteToken(t, tok, 0xE4), byteToken(t, tok, 0xBD)}
	m := &scriptModel{vocab: tok.VocabSize(), promptLen: len(pids), script: append(script, script...)}
	srv := hfEngine(t, tok, m)
	code, out := postJSON(t, srv.URL+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 2, "temperature": 0, "return_token_ids": true})
	var r CompletionResponse
	if err := json.Unmarshal(out, &r); code != http.StatusOK || err != nil {
		t.Fatalf("%d %s", code, out)
	}
	if c := r.Choices[0]; !slices.Equal(c.PromptTokenIDs, pids) || c.Text != "\ufffd" || *c.FinishReason != "length" {
		t.Fatalf("prompt %v text %q finish %v", c.PromptTokenIDs, c.Text, *c.FinishReason)
	}
}

// TestTokenizerChat: /v1/chat/completions renders the messages with the
// chat template (add_generation_prompt true by default, false on request),
// passes tools and chat_template_kwargs to it, turns a tool call's JSON
// string arguments into the object Qwen3's template prints, and joins text
// parts with "\n"; the prompt ids are the template's render encoded.
func TestTokenizerChat(t *testing.T) {
	tok := realDir(t, realtok.Qwen3)
	eos, _ := tok.TokenID("<|im_end|>")
	msgs := `[{"role": "system", "content": "Be brief."},
		{"role": "user", "content": [{"type": "text", "text": "Weather"}, {"type": "text", "text": "in Paris?"}]},
		{"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 2}"}}]},
		{"role": "tool", "tool_call_id": "c1", "content": "18C"}]`
	tools := `[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]`
	want := func(gen bool, vars map[string]any) []int32 {
		norm := strings.Replace(msgs, `[{"type": "text", "text": "Weather"}, {"type": "text", "text": "in Paris?"}]`, `"Weather\nin Paris?"`, 1)
		norm = strings.Replace(norm, `"{\"city\": \"Paris\", \"days\": 2}"`, `{"city": "Paris", "days": 2}`, 1)
		ids, _, err := tok.RenderIDs("", chattemplate.Input{Messages: json.RawMessage(norm), Tools: json.RawMessage(tools), AddGenerationPrompt: gen, Vars: vars})
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	for _, c := range []struct {
		name string
		body map[string]any
		ids  []int32
	}{
		{"default", map[string]any{}, want(true, nil)},
		{"no generation prompt", map[string]any{"add_generation_prompt": false}, want(false, nil)},
		{"kwargs", map[string]any{"chat_template_kwargs": map[string]any{"enable_thinking": false}}, want(true, map[string]any{"enable_thinking": false})},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := &scriptModel{vocab: tok.VocabSize(), promptLen: len(c.ids), script: append(tok.Encode("18C, sunny."), eos)}
			srv := hfEngine(t, tok, m)
			body := map[string]any{"messages": json.RawMessage(msgs), "tools": json.RawMessage(tools), "temperature": 0, "return_token_ids": true}
			for k, v := range c.body {
				body[k] = v
			}
			code, out := postJSON(t, srv.URL+"/v1/chat/completions", body)
			var r ChatResponse
			if err := json.Unmarshal(out, &r); code != http.StatusOK || err != nil {
				t.Fatalf("%d %s", code, out)
			}
			ch := r.Choices[0]
			if !slices.Equal(ch.PromptTokenIDs, c.ids) {
				t.Fatalf("prompt\n %q\nwant\n %q", tok.Decode(ch.PromptTokenIDs), tok.Decode(c.ids))
			}
			if ch.Message.Content != "18C, sunny." || *ch.FinishReason != "stop" {
				t.Fatalf("reply %q finish %v", ch.Message.Content, *ch.FinishReason)
			}
			if text := tok.Decode(ch.PromptTokenIDs); !strings.Contains(text, `"arguments": {"city": "Paris", "days": 2}`) || !strings.Contains(text, "Weather\nin Paris?") {
				t.Fatalf("prompt text %q", text)
			}
		})
	}
	// A template error is the client's: 400 naming it.
	srv := hfEngine(t, tok, &scriptModel{vocab: tok.VocabSize()})
	bad := json.RawMessage(`[{"role": "assistant", "content": "x", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{not json"}}]}]`)
	code, out := postJSON(t, srv.URL+"/v1/chat/completions", map[string]any{"messages": bad})
	if code != http.StatusBadRequest || !strings.Contains(string(out), "arguments is not JSON") {
		t.Fatalf("bad arguments: %d %s", code, out)
	}
}
