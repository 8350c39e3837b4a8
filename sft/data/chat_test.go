package data

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/internal/realtok"
	"github.com/asyncrl/asyncrl/model/chattemplate"
)

// TestPretokenizeChat: chat JSONL rows ({"messages", "tools"?}) rendered
// with the real Qwen3 template come out as the template's tokens with a loss
// mask on the assistant's tokens only (content and <|im_end|>, not the
// "\n" after it, nor the system/user/tool messages); a row whose rendering
// is not prefix-consistent or has no assistant message fails naming its
// line; chat rows without a chat tokenizer are refused naming the flag.
func TestPretokenizeChat(t *testing.T) {
	tok, err := chattemplate.LoadDir(realtok.Dir(t, realtok.Qwen3))
	if err != nil {
		t.Fatal(err)
	}
	rows := []string{
		`{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "3*7?"}, {"role": "assistant", "content": "21."}, {"role": "user", "content": "+1?"}, {"role": "assistant", "content": "22."}]}`,
		`{"messages": [{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}, {"role": "tool", "content": "18C"}, {"role": "assistant", "content": "18C."}],
		  "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]}`,
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "chat.jsonl")
	os.WriteFile(in, []byte(rows[0]+"\n"+strings.ReplaceAll(rows[1], "\n", "")+"\n"), 0o644)
	out := filepath.Join(dir, "out")
	st, err := Pretokenize(context.Background(), in, tok, PretokenizeOptions{Out: out, EOS: 151643, Chat: tok})
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows != 2 {
		t.Fatalf("stats %+v", st)
	}
	cfg := DefaultConfig()
	cfg.Datasets = []DatasetConfig{{Name: "chat", Path: out}}
	cfg.Sampler.Kind = "sequential"
	cfg.Sampler.Epochs = 1
	cfg.VocabSize = tok.VocabSize()
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	exs := drain(t, s, -1)
	if len(exs) != 2 {
		t.Fatalf("%d examples", len(exs))
	}
	wantSpans := [][]string{
		{"21.<|im_end|>", "<think>\n\n</think>\n\n22.<|im_end|>"},
		{"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>", "<think>\n\n</think>\n\n18C.<|im_end|>"},
	}
	for k, ex := range exs {
		var row struct {
			Messages json.RawMessage `json:"messages"`
			Tools    json.RawMessage `json:"tools"`
		}
		json.Unmarshal([]byte(rows[k]), &row)
		want, _, err := tok.RenderIDs("", chattemplate.Input{Messages: row.Messages, Tools: row.Tools})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ex.Tokens, want) {
			t.Fatalf("row %d: tokens are not the template's render (no EOS may be appended to chat rows)", k)
		}
		var got []string
		for i := 0; i < len(ex.Tokens); {
			if ex.LossMask[i] == 0 {
				i++
				continue
			}
			j := i
			for j < len(ex.Tokens) && ex.LossMask[j] == 1 {
				j++
			}
			got = append(got, tok.Decode(ex.Tokens[i:j]))
			i = j
		}
		if !slices.Equal(got, wantSpans[k]) {
			t.Errorf("row %d: trained spans %q, want %q", k, got, wantSpans[k])
		}
	}

	// A bad row names its line; the kinds cannot be mixed; no chat tokenizer.
	for _, c := range []struct {
		body  string
		chat  ChatTokenizer
		wants string
	}{
		{rows[0] + "\n" + `{"messages": [{"role": "user", "content": "no answer"}]}` + "\n", tok, "line 2: chattemplate: bad input: no assistant message"},
		{rows[0] + "\n" + `{"text": "plain"}` + "\n", tok, "line 2: mixes row kinds"},
		{rows[0] + "\n", nil, "line 1: a chat row needs a tokenizer with a chat template"},
	} {
		os.WriteFile(in, []byte(c.body), 0o644)
		_, err := Pretokenize(context.Background(), in, tok, PretokenizeOptions{Out: filepath.Join(t.TempDir(), "o"), EOS: -1, Chat: c.chat})
		if err == nil || !strings.Contains(err.Error(), c.wants) {
			t.Errorf("err %v, want %q", err, c.wants)
		}
	}
}
