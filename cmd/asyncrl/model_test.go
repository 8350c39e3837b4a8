package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/model/transformer"
	"github.com/asyncrl/asyncrl/weights/safetensors"
)

// tokenizerDir holds the Qwen2-style test tokenizer (273 tokens,
// <|im_end|> = 272) and a tokenizer_config.json naming it as EOS.
func tokenizerDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	js, err := os.ReadFile("../../model/hftokenizer/testdata/qwen2/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "tokenizer.json"), js, 0o644)
	os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"bos_token": null, "eos_token": {"content": "<|im_end|>", "special": true}, "model_max_length": 4096}`), 0o644)
	return dir
}

func TestModelInitAndInspect(t *testing.T) {
	tok := tokenizerDir(t)
	for _, arch := range transformer.Archs() {
		t.Run(string(arch), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "ckpt")
			code, stdout, stderr := cli(t, "model", "init", "--arch", string(arch), "--preset", "tiny", "--tokenizer", tok, "--out", out, "--seed", "3", "--shard-size", "40000")
			if code != 0 {
				t.Fatalf("init: %d %s", code, stderr)
			}
			if !strings.Contains(stdout, "parameters") {
				t.Fatalf("init said %q", stdout)
			}
			for _, f := range []string{"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", safetensors.IndexFileName} {
				if _, err := os.Stat(filepath.Join(out, f)); err != nil {
					t.Fatalf("%s missing: %v", f, err)
				}
			}
			m, err := transformer.Load(out)
			if err != nil {
				t.Fatal(err)
			}
			if m.VocabSize() != 273 || !slices.Equal(m.EOSIDs(), []int32{272}) {
				t.Fatalf("vocab %d eos %v", m.VocabSize(), m.EOSIDs())
			}
			// The same seed gives the same weights.
			again := filepath.Join(t.TempDir(), "again")
			if code, _, stderr := cli(t, "model", "init", "--arch", string(arch), "--tokenizer", tok, "--out", again, "--seed", "3"); code != 0 {
				t.Fatalf("init again: %s", stderr)
			}
			m2, err := transformer.Load(again)
			if err != nil {
				t.Fatal(err)
			}
			a, b := make([]float32, 273), make([]float32, 273)
			m.NextLogits([]int32{5, 6, 7}, a)
			m2.NextLogits([]int32{5, 6, 7}, b)
			if !slices.Equal(a, b) {
				t.Fatal("the same seed gave different weights")
			}

			code, stdout, stderr = cli(t, "model", "inspect", out)
			if code != 0 {
				t.Fatalf("inspect: %d %s", code, stderr)
			}
			for _, want := range []string{"model_type " + string(arch), "valid         yes", "model.embed_tokens.weight", "BF16", "asyncrl engine --weights"} {
				if !strings.Contains(stdout, want) {
					t.Errorf("inspect output lacks %q:\n%s", want, stdout)
				}
			}
			if moe := arch == transformer.Qwen3MoE || arch == transformer.DeepseekV3; moe != strings.Contains(stdout, "R3 routing replay") {
				t.Errorf("R3 line present = %v for %s", !moe, arch)
			}
			code, stdout, _ = cli(t, "model", "inspect", out, "--json")
			var r transformer.Report
			if code != 0 || json.Unmarshal([]byte(stdout), &r) != nil || r.Params != m.NumParams() || !r.Valid || len(r.Tensors) != len(m.TensorNames()) {
				t.Fatalf("inspect --json: %d %s", code, stdout)
			}
		})
	}
}

func TestModelInitRefusals(t *testing.T) {
	dir := t.TempDir()
	full := filepath.Join(dir, "full")
	os.MkdirAll(full, 0o755)
	os.WriteFile(filepath.Join(full, "x"), nil, 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--vocab", "10", "--out", filepath.Join(dir, "a")}, "--arch is required"},
		{[]string{"--arch", "gpt2", "--vocab", "10", "--out", filepath.Join(dir, "a")}, "qwen3, qwen3_moe, llama, deepseek_v3"},
		{[]string{"--arch", "qwen3", "--out", filepath.Join(dir, "a")}, "--tokenizer DIR"},
		{[]string{"--arch", "qwen3", "--vocab", "10"}, "--out DIR is required"},
		{[]string{"--arch", "qwen3", "--vocab", "10", "--out", full}, "not empty"},
		{[]string{"--arch", "qwen3", "--vocab", "10", "--preset", "huge", "--out", filepath.Join(dir, "b")}, "tiny, small"},
		{[]string{"--arch", "qwen3", "--tokenizer", dir, "--out", filepath.Join(dir, "c")}, "tokenizer.json"},
	} {
		code, _, stderr := cli(t, append([]string{"model", "init"}, tc.args...)...)
		if code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", tc.args, code, stderr, tc.want)
		}
	}
	if code, _, stderr := cli(t, "model", "inspect", dir); code == 0 || !strings.Contains(stderr, "config.json") {
		t.Errorf("inspect of a directory without config.json: %d %q", code, stderr)
	}
}
