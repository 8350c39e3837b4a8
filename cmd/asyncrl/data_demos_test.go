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

// A chat environment's demonstrations (chatenv.Demonstrator: multihop)
// are chat rows with the tools and the assistant's tool calls, answered by
// the environment's own tool messages — what pretokenize renders with the
// template's tools preamble and tool-call format.
func TestDataDemosToolCalls(t *testing.T) {
	out := filepath.Join(t.TempDir(), "mh.jsonl")
	if code, stdout, errOut := cli(t, "data", "demos", "--task", "multihop", "--episodes", "20", "--seed", "2", out); code != 0 || !strings.Contains(stdout, "20 multihop episodes") {
		t.Fatalf("demos: %d %q %q", code, stdout, errOut)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var row struct {
			Messages []struct {
				Role, Content string
				ToolCallID    string `json:"tool_call_id"`
				ToolCalls     []struct {
					ID       string
					Function struct {
						Name      string
						Arguments map[string]any
					}
				} `json:"tool_calls"`
			}
			Tools []any
		}
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if len(row.Tools) != 2 {
			t.Fatalf("line %d: tools %v", i+1, row.Tools)
		}
		for k, m := range row.Messages {
			for _, c := range m.ToolCalls {
				calls++
				if reply := row.Messages[k+1]; reply.Role != "tool" || reply.ToolCallID != c.ID || strings.HasPrefix(reply.Content, "error") || c.Function.Arguments == nil {
					t.Fatalf("line %d: call %+v answered %+v", i+1, c, reply)
				}
			}
		}
	}
	if calls < 40 {
		t.Fatalf("%d tool calls in 20 episodes, want ≥ 2 each", calls)
	}
}
