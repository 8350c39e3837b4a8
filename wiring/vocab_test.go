package wiring

import (
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/actors/rollout"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/model/tokenizer"
)

// TestVocabulary: without a tokenizer the rollouts use the built-in
// character vocabulary; with engines.external[0].tokenizer they use the
// Hugging Face tokenizer (no BOS, special tokens end a turn and are not in
// the decoded text); a missing file fails naming the field.
func TestVocabulary(t *testing.T) {
	c := config.DefaultEngines()
	v, err := Vocabulary(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := v.(rollout.BuiltinVocab); !ok || v.Size() != tokenizer.VocabSize {
		t.Fatalf("default vocabulary %T size %d, want the built-in one", v, v.Size())
	}
	c.External = []config.ExternalEngine{{URL: "http://127.0.0.1:1", Kind: config.EngineVLLM, WeightLoad: config.LoadDelta,
		Tokenizer: "../model/hftokenizer/testdata/qwen2/tokenizer.json"}}
	v, err = Vocabulary(c)
	if err != nil {
		t.Fatal(err)
	}
	ids := v.Encode("lower newer<|endoftext|>")
	if len(ids) < 3 || len(v.Prefix()) != 0 {
		t.Fatalf("encode = %v, prefix %v", ids, v.Prefix())
	}
	last := ids[len(ids)-1]
	if !v.IsEOS(last) || v.IsEOS(ids[0]) {
		t.Fatalf("IsEOS(%d)=%v (the special token), IsEOS(%d)=%v (a word piece)", last, v.IsEOS(last), ids[0], v.IsEOS(ids[0]))
	}
	if got := v.Decode(ids); got != "lower newer" {
		t.Fatalf("decode = %q, want the text without the special token", got)
	}
	for _, id := range ids {
		if id < 0 || id >= v.Size() {
			t.Fatalf("id %d outside [0, %d)", id, v.Size())
		}
	}
	c.External[0].Tokenizer = "/nonexistent/tokenizer.json"
	if _, err := Vocabulary(c); err == nil || !strings.Contains(err.Error(), "engines.external[0].tokenizer") {
		t.Fatalf("missing file: err = %v", err)
	}
}
