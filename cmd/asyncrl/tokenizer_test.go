package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/internal/realtok"
	"github.com/asyncrl/asyncrl/model/chattemplate"
)

// TestTokenizerRender: `asyncrl tokenizer render` on the real Qwen3
// directory prints the template's text and the ids RenderIDs gives, with
// tools from a separate file, a template variable and the generation
// prompt; --json carries the same; bad input exits 1 naming the flag.
func TestTokenizerRender(t *testing.T) {
	dir := realtok.Dir(t, realtok.Qwen3)
	msgs := writeFile(t, "chat.json", `{"messages": [{"role": "user", "content": "Weather in Paris?"}]}`)
	tools := writeFile(t, "tools.json", `[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]`)
	args := []string{"tokenizer", "render", "--tokenizer", dir, "--messages", msgs, "--tools", tools, "--generation-prompt", "--var", "enable_thinking=false"}
	code, out, errOut := cli(t, append(args, "--json")...)
	if code != 0 {
		t.Fatalf("render --json: %d %q", code, errOut)
	}
	var got struct {
		Text   string
		IDs    []int32
		Tokens []string
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	tok, err := chattemplate.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	wantIDs, wantText, err := tok.RenderIDs("", chattemplate.Input{
		Messages:            json.RawMessage(`[{"role": "user", "content": "Weather in Paris?"}]`),
		Tools:               json.RawMessage(`[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]`),
		AddGenerationPrompt: true,
		Vars:                map[string]any{"enable_thinking": false},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.Text != wantText || !slices.Equal(got.IDs, wantIDs) || len(got.Tokens) != len(got.IDs) {
		t.Fatalf("render --json = %q %v, want %q %v", got.Text, got.IDs, wantText, wantIDs)
	}
	for _, want := range []string{`"name": "get_weather"`, "<|im_start|>assistant\n<think>\n\n</think>\n\n"} {
		if !strings.Contains(got.Text, want) {
			t.Errorf("text lacks %q: %q", want, got.Text)
		}
	}
	code, out, _ = cli(t, args...)
	if code != 0 || !strings.HasPrefix(out, wantText) || !strings.Contains(out, "--- "+itoa(len(wantIDs))+" tokens\n151644 ") {
		t.Fatalf("render (text): %d %q", code, out)
	}

	// Refusals name what to fix.
	noTmpl := t.TempDir()
	b, _ := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	os.WriteFile(filepath.Join(noTmpl, "tokenizer.json"), b, 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"tokenizer", "render", "--tokenizer", noTmpl, "--messages", msgs}, "no chat template"},
		{[]string{"tokenizer", "render", "--tokenizer", dir, "--messages", msgs, "--var", "x=notjson"}, "--var"},
		{[]string{"tokenizer", "render", "--tokenizer", dir, "--messages", writeFile(t, "bad.json", `{"msgs": []}`)}, "no \"messages\""},
		{[]string{"tokenizer", "render", "--messages", msgs}, "--tokenizer DIR"},
	} {
		if code, _, errOut := cli(t, c.args...); code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d %q, want 1 and %q", c.args, code, errOut, c.want)
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// asyncrl engine --tokenizer refuses a tokenizer the served model has no
// embedding for, before listening (the built-in policy has 98 ids).
func TestEngineTokenizerFlag(t *testing.T) {
	dir := realtok.Dir(t, realtok.Qwen3)
	code, _, errOut := cli(t, "engine", "--tokenizer", dir, "--listen", "127.0.0.1:0")
	if code != 1 || !strings.Contains(errOut, "--tokenizer") || !strings.Contains(errOut, "does not belong to this model") {
		t.Fatalf("exit %d %q", code, errOut)
	}
}

// asyncrl data pretokenize renders chat JSONL with the tokenizer
// directory's template; a tokenizer.json alone refuses chat rows naming the
// fix.
func TestDataPretokenizeChat(t *testing.T) {
	dir := realtok.Dir(t, realtok.Qwen3)
	in := writeFile(t, "chat.jsonl", `{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}`+"\n")
	out := filepath.Join(t.TempDir(), "shards")
	if code, stdout, errOut := cli(t, "data", "pretokenize", "--tokenizer", dir, in, out); code != 0 || !strings.Contains(stdout, "1 rows") {
		t.Fatalf("pretokenize: %d %q %q", code, stdout, errOut)
	}
	code, stdout, _ := cli(t, "data", "inspect", "--json", out)
	if code != 0 || !strings.Contains(stdout, `"mask": "loss_mask"`) {
		t.Fatalf("inspect: %d %s", code, stdout)
	}
	code, _, errOut := cli(t, "data", "pretokenize", "--tokenizer", filepath.Join(dir, "tokenizer.json"), in, filepath.Join(t.TempDir(), "o"))
	if code != 1 || !strings.Contains(errOut, "chat row needs a tokenizer with a chat template") {
		t.Fatalf("tokenizer.json only: %d %q", code, errOut)
	}
}
