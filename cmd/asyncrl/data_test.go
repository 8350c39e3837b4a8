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
