package rollout

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/model/tokenizer"
	"github.com/asyncrl/asyncrl/tasks"
	"github.com/asyncrl/asyncrl/tasks/chatenv"
	_ "github.com/asyncrl/asyncrl/tasks/toolenv"
)

// TestCalculatorEpisodeToolPaths: the calculator environment through
// RunEpisode with the built-in vocabulary (no chat template: messages as
// plain text): a malformed call is answered by the rollout's error
// message without reaching the environment, a runaway expression by the
// sandbox's time-limit error (counted: Episode.ToolTimeouts, from the
// environment's chatenv.MetaToolTimeouts), a good call by its value, and the verified answer
// ends the episode with reward 1; the model's tokens are the only ones in
// the loss.
func TestCalculatorEpisodeToolPaths(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("/usr/bin/python3 not installed")
	}
	task, err := tasks.Get("calculator")
	if err != nil {
		t.Fatal(err)
	}
	turns := []string{
		`<tool_call>{"name": "calc", "arguments": {"expr": }</tool_call>`,
		`<tool_call>{"name": "calc", "arguments": {"expr": "9**9**9**9"}}</tool_call>`,
		`<tool_call>{"name": "calc", "arguments": {"expr": "37+48"}}</tool_call>`,
		`85`,
	}
	gen := &scripted{}
	for k, s := range turns {
		gen.outs = append(gen.outs, text(s, true, int64(k), "stop"))
	}
	cfg := testCfg()
	cfg.MaxSeqLen = 2048
	cfg.MaxTokens = 128
	cfg.ToolFormat = chatenv.ToolsHermes
	cfg.EnvTimeout = 30 * time.Second
	ep, err := RunEpisode(context.Background(), gen, task, tasks.Prompt{ID: "p", Text: "37+48="}, "calc/0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if ep.Turns != 4 || ep.Reward != 1 || ep.ToolCalls != 3 || ep.MalformedCalls != 1 || ep.ToolTimeouts != 1 {
		t.Fatalf("turns %d reward %v calls %d malformed %d timed out %d", ep.Turns, ep.Reward, ep.ToolCalls, ep.MalformedCalls, ep.ToolTimeouts)
	}
	var ctxText []string
	run := []int32{}
	for i, m := range ep.LossMask {
		if m == 0 {
			run = append(run, ep.Tokens[i])
		} else if len(run) > 0 {
			ctxText, run = append(ctxText, tokenizer.Decode(run)), nil
		}
	}
	want := []string{"What is 37+48?", "error: malformed tool call 0", "error: toolenv: sandbox: ", "85"}
	if len(ctxText) != len(want) {
		t.Fatalf("context runs %q", ctxText)
	}
	for i, w := range want {
		if !strings.Contains(ctxText[i], w) {
			t.Errorf("context run %d %q, want it to hold %q", i, ctxText[i], w)
		}
	}
}
