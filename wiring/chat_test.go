package wiring

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/internal/realtok"
)

// TestChatFormat: rollout.chat_template off gives no chat format; on, with
// the real Qwen3 directory, conversations open with the templated prompt
// (system prompt, enable_thinking from chat_template_kwargs); a directory
// without a chat template fails at start naming the fix. Vocabulary takes
// the directory as well as its tokenizer.json.
func TestChatFormat(t *testing.T) {
	dir := realtok.Dir(t, realtok.Qwen3)
	ro := config.DefaultRollout()
	if f, err := ChatFormat(ro, dir); f != nil || err != nil {
		t.Fatalf("off: %v %v", f, err)
	}
	ro.ChatTemplate = true
	ro.SystemPrompt = "Be brief."
	ro.ChatTemplateKwargs = `{"enable_thinking": false}`
	f, err := ChatFormat(ro, dir)
	if err != nil {
		t.Fatal(err)
	}
	chat, err := f.NewChat()
	if err != nil {
		t.Fatal(err)
	}
	ids, err := chat.Open("2+2?")
	if err != nil {
		t.Fatal(err)
	}
	engines := config.DefaultEngines()
	engines.External = []config.ExternalEngine{{URL: "http://127.0.0.1:1", Kind: config.EngineVLLM, WeightLoad: config.LoadFull, Tokenizer: dir}}
	if TokenizerDir(engines) != dir {
		t.Fatalf("TokenizerDir = %q", TokenizerDir(engines))
	}
	v, err := Vocabulary(engines)
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
	if got := v.Decode(ids); got != strings.NewReplacer("<|im_start|>", "", "<|im_end|>", "").Replace(want) {
		t.Fatalf("prompt decodes (without special tokens) to %q", got)
	}
	engines.External[0].Tokenizer = filepath.Join(dir, "tokenizer.json")
	if TokenizerDir(engines) != dir {
		t.Fatalf("TokenizerDir of the file = %q", TokenizerDir(engines))
	}

	bare := t.TempDir()
	b, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(bare, "tokenizer.json"), b, 0o644)
	if _, err := ChatFormat(ro, bare); err == nil || !strings.Contains(err.Error(), "rollout.chat_template") || !strings.Contains(err.Error(), "chat_template.jinja") {
		t.Fatalf("no template: %v", err)
	}
	if _, err := ChatFormat(ro, ""); err == nil || !strings.Contains(err.Error(), "engines.external[].tokenizer") {
		t.Fatalf("no directory: %v", err)
	}
}

// TestEngineTokenizer: a tokenizer whose ids the model has no embedding for
// is refused naming the file; a fitting one gives engine.WithTokenizer; a
// checkpoint directory with tokenizer.json is found by TokenizerIn.
func TestEngineTokenizer(t *testing.T) {
	dir := realtok.Dir(t, realtok.Qwen3)
	builtin, err := InitialPolicy("", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := EngineTokenizer(dir, builtin); err == nil || !strings.Contains(err.Error(), "tokenizer.json has 151669 ids but the model's embedding has") {
		t.Fatalf("mismatch: %v", err)
	}
	opts, err := EngineTokenizer(dir, &engine.HashModel{Vocab: 151936, MaxLen: 64})
	if err != nil || len(opts) != 1 {
		t.Fatalf("fitting tokenizer: %v %d", err, len(opts))
	}
	if opts, err := EngineTokenizer("", builtin); err != nil || opts != nil {
		t.Fatalf("no tokenizer: %v %v", opts, err)
	}
	if TokenizerIn(dir) != dir || TokenizerIn(t.TempDir()) != "" || TokenizerIn("") != "" {
		t.Fatal("TokenizerIn")
	}
}
