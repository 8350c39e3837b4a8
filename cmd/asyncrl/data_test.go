package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// generate → inspect → validate → bench on a small dataset, then a
// truncated shard: validate exits 1 naming that file and nothing else.
func TestDataCommands(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	if code, out, errOut := cli(t, "data", "generate", "--tokens", "2^14", "--shards", "3", "--vocab", "1000", "--min-len", "8", "--max-len", "64", dir); code != 0 || !strings.Contains(out, "16384 tokens in 3 arrow shards") {
		t.Fatalf("generate: %d %q %q", code, out, errOut)
	}
	code, out, errOut := cli(t, "data", "inspect", "--json", dir)
	var ins struct {
		Rows, Tokens int64
		Shards       []struct {
			IDsType string `json:"ids_type"`
		}
	}
	if code != 0 || json.Unmarshal([]byte(out), &ins) != nil || ins.Tokens != 1<<14 || len(ins.Shards) != 3 || ins.Shards[0].IDsType != "uint16" {
		t.Fatalf("inspect: %d %q %q", code, out, errOut)
	}
	if code, out, _ := cli(t, "data", "inspect", dir); code != 0 || !strings.Contains(out, "length histogram") {
		t.Fatalf("inspect text: %d %q", code, out)
	}
	if code, out, errOut := cli(t, "data", "validate", "--vocab", "1000", dir); code != 0 || !strings.Contains(out, "OK") {
		t.Fatalf("validate: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := cli(t, "data", "validate", "--vocab", "500", dir); code != 1 || !strings.Contains(out, "outside the vocabulary [0, 500)") {
		t.Fatalf("validate --vocab 500: %d %q %q, want exit 1 and out-of-vocabulary rows", code, out, errOut)
	}
	if code, out, errOut := cli(t, "data", "bench", "--json", "--budget", "128", "--dp", "2", dir); code != 0 || !strings.Contains(out, `"tokens": 16384`) {
		t.Fatalf("bench: %d %q %q", code, out, errOut)
	}
	bad := filepath.Join(dir, "shard-00001.arrow")
	b, _ := os.ReadFile(bad)
	os.WriteFile(bad, b[:len(b)/2], 0o644)
	code, out, _ = cli(t, "data", "validate", dir)
	if code != 1 || strings.Count(out, "BAD ") != 1 || !strings.Contains(out, "BAD "+bad+": truncated") {
		t.Fatalf("validate a truncated shard: %d %q, want one BAD line naming %s", code, out, bad)
	}
	if code, _, errOut := cli(t, "data", "generate", "--tokens", "x", dir); code != 1 || !strings.Contains(errOut, "--tokens") {
		t.Fatalf("bad --tokens: %d %q", code, errOut)
	}
}

// TestDataValidateNextToTokenizer: a dataset next to the tokenizer it was
// made with is checked against that tokenizer's vocabulary without a flag
// (an id past it is refused naming file and row, and the report names the
// tokenizer); --model and --tokenizer name one elsewhere; without any, the
// report says the ids were not checked and how to check them.
func TestDataValidateNextToTokenizer(t *testing.T) {
	model := t.TempDir()
	tok := filepath.Join(model, "tokenizer.json")
	fixture, err := os.ReadFile("../../model/hftokenizer/testdata/qwen2/tokenizer.json") // 273 ids
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tok, fixture, 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(model, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	shard := filepath.Join(data, "r.jsonl")
	if err := os.WriteFile(shard, []byte("{\"input_ids\":[1,2,272]}\n{\"input_ids\":[1,273,3]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := cli(t, "data", "validate", data)
	if code != 1 || !strings.Contains(out, "ids checked against a vocabulary of 273 from "+filepath.Join(data, "..", "tokenizer.json")) ||
		!strings.Contains(out, "BAD "+shard+": row 1: token 1: id 273 outside the vocabulary [0, 273)") || strings.Count(out, "BAD ") != 1 {
		t.Fatalf("validate next to a tokenizer: %d %q %q", code, out, errOut)
	}
	code, out, _ = cli(t, "data", "validate", "--json", shard)
	var rep struct {
		BadRows int64 `json:"bad_rows"`
		Vocab   struct {
			Size int
			From string
		}
	}
	if code != 1 || json.Unmarshal([]byte(out), &rep) != nil || rep.BadRows != 1 || rep.Vocab.Size != 273 || rep.Vocab.From != filepath.Join(data, "..", "tokenizer.json") {
		t.Fatalf("validate --json: %d %q", code, out)
	}

	// The same rows elsewhere: nothing to find, nothing refused, and the
	// report says so; --model / --tokenizer bring the check back.
	elsewhere := filepath.Join(t.TempDir(), "d")
	if err := os.Mkdir(elsewhere, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(elsewhere, "r.jsonl"), []byte("{\"input_ids\":[1,2,272]}\n{\"input_ids\":[1,273,3]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ = cli(t, "data", "validate", elsewhere)
	if code != 0 || !strings.Contains(out, "ids not checked against a vocabulary: no tokenizer.json or config.json with vocab_size in "+elsewhere+" or "+filepath.Join(elsewhere, "..")) ||
		!strings.Contains(out, "--tokenizer FILE, --model DIR or --vocab N") {
		t.Fatalf("validate with no vocabulary near: %d %q", code, out)
	}
	for _, flag := range [][]string{{"--model", model}, {"--tokenizer", tok}} {
		code, out, _ = cli(t, append([]string{"data", "validate"}, append(flag, elsewhere)...)...)
		if code != 1 || !strings.Contains(out, "ids checked against a vocabulary of 273 from "+tok) || !strings.Contains(out, "id 273 outside the vocabulary [0, 273)") {
			t.Fatalf("validate %v: %d %q", flag, code, out)
		}
	}
	if code, _, errOut := cli(t, "data", "validate", "--vocab", "300", "--model", model, elsewhere); code != 1 || !strings.Contains(errOut, "give one of --vocab, --tokenizer and --model") {
		t.Fatalf("two vocabulary flags: %d %q", code, errOut)
	}
}
