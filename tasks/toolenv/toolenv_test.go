package toolenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/tasks"
	"github.com/asyncrl/asyncrl/tasks/chatenv"
)

func sandbox(t *testing.T) Sandbox {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("/usr/bin/python3 not installed")
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return DefaultSandbox(root)
}

// TestSandboxLimits: the evaluator computes arithmetic and refuses
// anything else with an error line; a computation past the CPU limit is
// killed, one past the wall clock is killed at it; the child sees none of
// the parent's environment.
func TestSandboxLimits(t *testing.T) {
	sb := sandbox(t)
	ctx := context.Background()
	for _, c := range []struct{ in, want string }{
		{"2+3*4", "14"}, {"(7-10)//2", "-2"}, {"6/4", "1.5"}, {"8/2", "4"},
		{"__import__('os').system('id')", "error: only numbers"}, {"1/0", "error: division by zero"}, {"2+", "error: "},
	} {
		got, err := sb.Run(ctx, c.in)
		if err != nil || !strings.HasPrefix(got, c.want) {
			t.Errorf("%q: %q %v, want %q", c.in, got, err, c.want)
		}
	}
	cpu := sb
	cpu.Timeout = time.Minute // the CPU limit (1 s of CPU) must come first, even on a loaded machine
	if _, err := cpu.Run(ctx, "9**9**9**9"); !errors.Is(err, ErrSandbox) || !strings.Contains(err.Error(), "CPU limit") {
		t.Errorf("runaway power: %v, want killed by the CPU limit", err)
	}
	slow := sb
	slow.Command = []string{"/usr/bin/python3", "-c", "import time; time.sleep(30)"}
	slow.Timeout = 200 * time.Millisecond
	start := time.Now()
	if _, err := slow.Run(ctx, ""); !errors.Is(err, ErrSandbox) || !strings.Contains(err.Error(), "wall-clock") {
		t.Errorf("sleeper: %v, want the wall-clock limit", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the sleeper was not killed at its limit (%v)", d)
	}
	t.Setenv("ASYNCRL_SECRET", "x")
	env := sb
	env.Command = []string{"/usr/bin/python3", "-c", "import os, sys; print(len(os.environ.get('ASYNCRL_SECRET', '')))"}
	if got, err := env.Run(ctx, ""); err != nil || got != "0" {
		t.Errorf("the child saw the parent's environment: %q %v", got, err)
	}
}

// TestSandboxNoNetwork: as root the child runs in an empty network
// namespace: it cannot reach a server listening on the parent's loopback.
func TestSandboxNoNetwork(t *testing.T) {
	sb := sandbox(t)
	if !sb.Isolated() {
		t.Skip("not root: no network namespace; the calc evaluator refuses network by design")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	probe := sb
	probe.Command = []string{"/usr/bin/python3", "-c", fmt.Sprintf(
		"import socket\ntry:\n socket.create_connection(('127.0.0.1', %d), 1); print('connected')\nexcept OSError as e:\n print('refused', e)", port)}
	got, err := probe.Run(context.Background(), "")
	if err != nil || !strings.HasPrefix(got, "refused") {
		t.Fatalf("probe in the sandbox: %q %v, want refused", got, err)
	}
	// The same probe outside the sandbox connects (the check is not vacuous).
	c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
	if err != nil {
		t.Fatalf("the parent cannot connect either: %v", err)
	}
	c.Close()
}

// TestCalculatorEpisode: reset shows the question and the calc tool; calc
// calls are evaluated in the sandbox and answered with tool messages (an
// unknown tool, bad arguments and a runaway expression with an error the
// model reads); the final answer is verified.
func TestCalculatorEpisode(t *testing.T) {
	sandbox(t)
	task, err := tasks.Get("calculator")
	if err != nil {
		t.Fatal(err)
	}
	ct := task.(chatenv.Task)
	ctx := context.Background()
	env := ct.NewChatEnv()
	st, err := env.Reset(ctx, tasks.Prompt{Text: "37+48="})
	if err != nil || len(st.Messages) != 2 || st.Messages[1].Content != "What is 37+48?" || !json.Valid(st.Tools) {
		t.Fatalf("reset %+v %v", st, err)
	}
	call := func(name, args string) chatenv.ToolCall {
		return chatenv.ToolCall{ID: "call_" + name, Type: "function", Function: chatenv.FunctionCall{Name: name, Arguments: json.RawMessage(args)}}
	}
	r, err := env.Step(ctx, chatenv.Action{Message: chatenv.Message{Role: "assistant", ToolCalls: []chatenv.ToolCall{
		call("calc", `{"expr": "37+48"}`), call("search", `{}`), call("calc", `{"x": 1}`), call("calc", `{"expr": "9**9**9**9"}`)}}})
	if err != nil || r.Done || len(r.Messages) != 4 {
		t.Fatalf("tool step %+v %v", r, err)
	}
	for i, want := range []string{"85", "error: unknown tool", `error: calc takes`, "error: toolenv: sandbox: "} {
		if m := r.Messages[i]; m.Role != "tool" || !strings.HasPrefix(m.Content, want) {
			t.Errorf("reply %d %+v, want %q", i, m, want)
		}
	}
	r, err = env.Step(ctx, chatenv.Action{Message: chatenv.Message{Role: "assistant", Content: " 85\n"}})
	if err != nil || !r.Done || r.Reward != 1 {
		t.Fatalf("answer %+v %v", r, err)
	}
	env = ct.NewChatEnv()
	if _, err := env.Reset(ctx, tasks.Prompt{Text: "37+48="}); err != nil {
		t.Fatal(err)
	}
	if r, _ := env.Step(ctx, chatenv.Action{Message: chatenv.Message{Role: "assistant", Content: "84"}}); !r.Done || r.Reward >= 1 || r.Reward <= 0 {
		t.Fatalf("a near miss gets partial credit, got %v", r.Reward)
	}
	// The empty think block Qwen3's template puts before a final answer
	// (what a model warmed up on its renderings writes) is skipped; junk
	// in its place is not.
	for answer, want := range map[string]float64{"<think>\n\n</think>\n\n85": 1, "<think>\n85": 0} {
		env = ct.NewChatEnv()
		if _, err := env.Reset(ctx, tasks.Prompt{Text: "37+48="}); err != nil {
			t.Fatal(err)
		}
		if r, _ := env.Step(ctx, chatenv.Action{Message: chatenv.Message{Role: "assistant", Content: answer}}); !r.Done || r.Reward != want {
			t.Fatalf("answer %q: reward %v, want %v", answer, r.Reward, want)
		}
	}
}
