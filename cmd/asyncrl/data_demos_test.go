package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// asyncrl data demos writes chat JSONL a chat template can render: one
// episode per line, user first, assistant last; the same seed gives the
// same file; a task without demonstrations is refused naming one that has.
func TestDataDemos(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")
	for _, out := range []string{a, b} {
		if code, stdout, errOut := cli(t, "data", "demos", "--task", "guess_chat", "--episodes", "50", "--seed", "3", out); code != 0 || !strings.Contains(stdout, "50 guess_chat episodes") {
			t.Fatalf("demos: %d %q %q", code, stdout, errOut)
		}
	}
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if string(ab) != string(bb) {
		t.Fatal("the same seed wrote two different files")
	}
	f, err := os.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	lines := 0
	for sc.Scan() {
		var row struct {
			Messages []struct{ Role, Content string }
		}
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatalf("line %d: %v", lines+1, err)
		}
		m := row.Messages
		if len(m) < 2 || m[0].Role != "user" || m[len(m)-1].Role != "assistant" {
			t.Fatalf("line %d: %+v", lines+1, m)
		}
		lines++
	}
	if lines != 50 {
		t.Fatalf("%d lines, want 50", lines)
	}
	if code, _, errOut := cli(t, "data", "demos", "--task", "reverse", filepath.Join(dir, "c.jsonl")); code == 0 || !strings.Contains(errOut, "guess_chat") {
		t.Fatalf("a task without demonstrations: %d %q", code, errOut)
	}
}
