package openenv

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/tasks"
	"github.com/asyncrl/asyncrl/tasks/chatenv"
	"github.com/asyncrl/asyncrl/tasks/openenv/openenvtest"
)

// TestOpenEnvEpisode: an episode against an OpenEnv-style server over
// real HTTP: the reset observation's field is the user message, a tool
// call goes as ToolCallAction and comes back as a tool message, plain
// text goes as {"message"}, rewards add up, done reads /state into the
// metadata; the server is leased to one episode at a time (a second Reset
// waits and times out), and given back by Close.
func TestOpenEnvEpisode(t *testing.T) {
	srv := openenvtest.New()
	defer srv.Close()
	ctx := context.Background()
	task, err := New(ctx, Config{Name: "echo", URLs: []string{srv.URL}, MaxTurns: 3, MaxTokensPerTurn: 16,
		System: "Answer with a number.", ObservationField: "echoed_message"})
	if err != nil {
		t.Fatal(err)
	}
	env := task.NewChatEnv()
	st, err := env.Reset(ctx, tasks.Prompt{Seed: 1})
	if err != nil || len(st.Messages) != 2 || st.Messages[1].Content != "Say a number." || st.Messages[0].Role != "system" {
		t.Fatalf("start %+v %v", st, err)
	}
	// The server is leased: another episode waits.
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	if _, err := task.NewChatEnv().Reset(wctx, tasks.Prompt{}); !errors.Is(err, chatenv.ErrTimeout) {
		t.Fatalf("second reset while leased: %v", err)
	}
	cancel()
	call := chatenv.ToolCall{ID: "call_0", Type: "function", Function: chatenv.FunctionCall{Name: "add", Arguments: json.RawMessage(`{"a": 2, "b": 3}`)}}
	r, err := env.Step(ctx, chatenv.Action{Message: chatenv.Message{Role: "assistant", ToolCalls: []chatenv.ToolCall{call}}})
	if err != nil || len(r.Messages) != 1 || r.Messages[0].Role != "tool" || r.Messages[0].Content != "5" || r.Messages[0].ToolCallID != "call_0" || r.Reward != 0 {
		t.Fatalf("tool step %+v %v", r, err)
	}
	r, err = env.Step(ctx, chatenv.Action{Message: chatenv.Message{Role: "assistant", Content: "5"}, Text: "5"})
	if err != nil || r.Done || r.Reward != 1 || r.Messages[0].Content != "5" || r.Messages[0].Role != "user" {
		t.Fatalf("text step %+v %v", r, err)
	}
	r, err = env.Step(ctx, chatenv.Action{Text: "five"})
	if err != nil || !r.Done || r.Reward != 0 {
		t.Fatalf("last step %+v %v", r, err)
	}
	if st, _ := r.Metadata["state"].(map[string]any); st["step_count"] != 2.0 {
		t.Fatalf("state metadata %+v", r.Metadata)
	}
	_ = env.Close(ctx)
	if _, err := task.NewChatEnv().Reset(ctx, tasks.Prompt{}); err != nil {
		t.Fatalf("reset after close: %v", err)
	}
}

// TestOpenEnvFailures: a 500 surfaces FastAPI's detail as ErrEnv, a hung
// step is ErrTimeout at the caller's deadline, a dead server fails New.
func TestOpenEnvFailures(t *testing.T) {
	srv := openenvtest.New()
	ctx := context.Background()
	task, err := New(ctx, Config{Name: "echo", URLs: []string{srv.URL}, MaxTurns: 3, MaxTokensPerTurn: 16})
	if err != nil {
		t.Fatal(err)
	}
	env := task.NewChatEnv()
	defer env.Close(ctx)
	if _, err := env.Reset(ctx, tasks.Prompt{}); err != nil {
		t.Fatal(err)
	}
	srv.Fail.Store(true)
	if _, err := env.Step(ctx, chatenv.Action{Text: "1"}); !errors.Is(err, chatenv.ErrEnv) || !strings.Contains(err.Error(), "simulated crash") {
		t.Fatalf("failing step: %v", err)
	}
	srv.Fail.Store(false)
	srv.Hang.Store(true)
	tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := env.Step(tctx, chatenv.Action{Text: "1"}); !errors.Is(err, chatenv.ErrTimeout) {
		t.Fatalf("hung step: %v", err)
	}
	srv.Close()
	if _, err := New(ctx, Config{Name: "echo", URLs: []string{srv.URL}, MaxTurns: 3, MaxTokensPerTurn: 16}); !errors.Is(err, chatenv.ErrEnv) {
		t.Fatalf("dead server: %v", err)
	}
}
