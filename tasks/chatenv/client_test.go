package chatenv

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/internal/pyenv"
	"github.com/asyncrl/asyncrl/tasks"
)

// TestClientAgainstSkyRLAdapter: the Go client drives the Python adapter
// serving a SkyRL-Gym-style BaseTextEnv (integrations/envs/tests/
// skyrl_calc_env.py) over real HTTP: /info becomes the Task's limits,
// reset gives the row's messages and tools, a tool call is answered by a
// tool message, the right answer ends with reward 1; an environment that
// raises fails the call with ErrEnv and its reason, a killed server with
// ErrEnv, a hung one with ErrTimeout at the caller's deadline.
func TestClientAgainstSkyRLAdapter(t *testing.T) {
	base, proc := pyenv.Start(t, "skyrl_calc_env:SPEC")
	ctx := context.Background()
	c, err := Dial(ctx, base, DefaultClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	if c.Name() != "skyrl_calc" || c.MaxTurns() != 3 || c.MaxTokensPerTurn() != 48 {
		t.Fatalf("info %+v", c.info)
	}
	env := c.NewChatEnv()
	start, err := env.Reset(ctx, tasks.Prompt{ID: "add-3~1", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(start.Messages) != 2 || start.Messages[1].Content != "What is 3+7?" || !strings.Contains(string(start.Tools), `"calc"`) {
		t.Fatalf("start %+v", start)
	}
	text := "<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expr\": \"3+7\"}}\n</tool_call>"
	msg, _ := ParseToolCalls(ToolsHermes, text)
	r, err := env.Step(ctx, Action{Message: msg, Text: text})
	if err != nil || r.Done || len(r.Messages) != 1 || r.Messages[0].Role != "tool" || r.Messages[0].Content != "10" {
		t.Fatalf("tool step %+v %v", r, err)
	}
	r, err = env.Step(ctx, Action{Message: Message{Role: "assistant", Content: "10"}, Text: "10"})
	if err != nil || !r.Done || r.Reward != 1 {
		t.Fatalf("answer step %+v %v", r, err)
	}
	if err := env.Close(ctx); err != nil {
		t.Fatal(err)
	}

	failing, _ := pyenv.Start(t, "skyrl_calc_env:FAILING")
	fc, err := Dial(ctx, failing, DefaultClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	fe := fc.NewChatEnv()
	if _, err := fe.Reset(ctx, tasks.Prompt{ID: "boom"}); err != nil {
		t.Fatal(err)
	}
	if _, err := fe.Step(ctx, Action{Text: "1"}); !errors.Is(err, ErrEnv) || !strings.Contains(err.Error(), "calculator backend unavailable") {
		t.Fatalf("raising env: %v", err)
	}

	dead := c.NewChatEnv()
	if _, err := dead.Reset(ctx, tasks.Prompt{Seed: 2}); err != nil {
		t.Fatal(err)
	}
	_ = proc.Kill()
	if _, err := dead.Step(ctx, Action{Text: "x"}); !errors.Is(err, ErrEnv) || errors.Is(err, ErrTimeout) {
		t.Fatalf("killed server: %v", err)
	}

	// A server that accepts and never answers: the caller's deadline.
	hung := hangServer(t)
	h := &Client{base: hung, cfg: DefaultClientConfig(), hc: c.hc, info: c.info}
	he := h.NewChatEnv().(*remoteEnv)
	he.id = "x"
	tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := he.Step(tctx, Action{Text: "x"}); !errors.Is(err, ErrTimeout) {
		t.Fatalf("hung server: %v", err)
	}
}
