package data

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func writeTestFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// A BPE tokenizer.json in miniature: ids 0–4 in model.vocab, one special
// token added at 9 (a gap, as Qwen's specials follow its merges).
const bpeTokenizer = `{"version": "1.0", "added_tokens": [{"id": 9, "content": "<|endoftext|>", "special": true}],
 "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4}, "merges": ["a b", "ab c"]}}`

// TestReadVocab: the size is one past the highest id a tokenizer.json
// knows (model.vocab as a map or, for Unigram, a list; added_tokens), or a
// model config.json's vocab_size (text_config's for a multimodal model).
func TestReadVocab(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, file, content string
		want                int
	}{
		{"bpe with added token", "bpe/tokenizer.json", bpeTokenizer, 10},
		{"unigram list", "uni/tokenizer.json", `{"model": {"type": "Unigram", "vocab": [["<unk>", 0], ["▁a", -1.5], ["b", -2]]}}`, 3},
		{"config", "m/config.json", `{"architectures": ["Qwen3ForCausalLM"], "vocab_size": 151936}`, 151936},
		{"multimodal config", "vl/config.json", `{"text_config": {"vocab_size": 262208}}`, 262208},
	}
	for _, c := range cases {
		p := writeTestFile(t, filepath.Join(dir, c.file), c.content)
		v, err := ReadVocab(p)
		if err != nil || v != (Vocab{Size: c.want, From: p}) {
			t.Errorf("%s: ReadVocab = %+v, %v; want %d from %s", c.name, v, err, c.want, p)
		}
		// The directory holding it reads the same.
		if v, err := ReadVocab(filepath.Dir(p)); err != nil || v.Size != c.want {
			t.Errorf("%s: ReadVocab(dir) = %+v, %v", c.name, v, err)
		}
	}
	// The hftokenizer fixture (Qwen2's test vocabulary: 270 ids + 3 specials).
	if v, err := ReadVocab("../../model/hftokenizer/testdata/qwen2/tokenizer.json"); err != nil || v.Size != 273 {
		t.Errorf("qwen2 fixture: %+v, %v; want 273", v, err)
	}
	for name, c := range map[string]struct{ file, content, want string }{
		"not json":          {"x/tokenizer.json", "<html>", "is not a Hugging Face tokenizer.json"},
		"no model.vocab":    {"y/tokenizer.json", `{"added_tokens": []}`, "no model.vocab"},
		"config without it": {"z/config.json", `{"hidden_size": 8}`, "has no vocab_size"},
	} {
		p := writeTestFile(t, filepath.Join(dir, c.file), c.content)
		if _, err := ReadVocab(p); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: err %v, want one naming %s and %q", name, err, p, c.want)
		}
	}
}

// TestFindVocab: a dataset's vocabulary is found in its directory, then the
// parent (a model directory with a data/ folder); a tokenizer.json wins
// over config.json in the same directory; a config.json without
// vocab_size is passed over; nothing found lists where it looked; a broken
// tokenizer.json is an error, not a silent "not checked".
func TestFindVocab(t *testing.T) {
	root := t.TempDir()
	model := filepath.Join(root, "model")
	writeTestFile(t, filepath.Join(model, "config.json"), `{"vocab_size": 64}`)
	writeTestFile(t, filepath.Join(model, "tokenizer.json"), bpeTokenizer)
	shard := writeTestFile(t, filepath.Join(model, "data", "a.jsonl"), `{"input_ids":[1]}`)
	for _, ds := range []string{filepath.Join(model, "data"), shard, filepath.Join(model, "data", "*.jsonl")} {
		v, ok, _, err := FindVocab(ds)
		if err != nil || !ok || v != (Vocab{Size: 10, From: filepath.Join(model, "data", "..", "tokenizer.json")}) {
			t.Errorf("FindVocab(%s) = %+v %v %v; want the parent's tokenizer.json (10)", ds, v, ok, err)
		}
	}
	cfgOnly := filepath.Join(root, "cfg")
	writeTestFile(t, filepath.Join(cfgOnly, "config.json"), `{"vocab_size": 64}`)
	writeTestFile(t, filepath.Join(cfgOnly, "a.jsonl"), `{"input_ids":[1]}`)
	if v, ok, _, err := FindVocab(cfgOnly); err != nil || !ok || v != (Vocab{Size: 64, From: filepath.Join(cfgOnly, "config.json")}) {
		t.Errorf("config.json only: %+v %v %v", v, ok, err)
	}
	bare := filepath.Join(root, "bare", "data")
	writeTestFile(t, filepath.Join(bare, "a.jsonl"), `{"input_ids":[1]}`)
	writeTestFile(t, filepath.Join(bare, "config.json"), `{"lr": 1e-5}`) // a training config, not a model's
	v, ok, searched, err := FindVocab(bare)
	if err != nil || ok || !reflect.DeepEqual(searched, []string{bare, filepath.Join(bare, "..")}) {
		t.Errorf("nothing to find: %+v %v %v %v", v, ok, searched, err)
	}
	broken := filepath.Join(root, "broken")
	writeTestFile(t, filepath.Join(broken, "tokenizer.json"), "{")
	writeTestFile(t, filepath.Join(broken, "a.jsonl"), `{"input_ids":[1]}`)
	if _, _, _, err := FindVocab(broken); err == nil || !strings.Contains(err.Error(), filepath.Join(broken, "tokenizer.json")) {
		t.Errorf("broken tokenizer.json: err %v, want one naming it", err)
	}
}
