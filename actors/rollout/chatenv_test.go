package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/internal/realtok"
	"github.com/asyncrl/asyncrl/model/chattemplate"
	"github.com/asyncrl/asyncrl/tasks"
	"github.com/asyncrl/asyncrl/tasks/chatenv"
)

// calcTools is the tool list the test environment announces.
var calcTools = json.RawMessage(`[{"type": "function", "function": {"name": "calc", "description": "Evaluate an arithmetic expression.", "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]}}}]`)

// agentTask is a chat environment written against chatenv.Env: a system
// and a user message and a calc tool; tool calls are answered with tool
// messages, a wrong answer with a user message, the right one ends the
// episode with reward 1. steps records every Action it was given.
type agentTask struct {
	mu    sync.Mutex
	steps []chatenv.Action
	// hang, when set, makes Step block until its context ends or hang is
	// closed; fail makes Step fail.
	hang chan struct{}
	fail error
}

func (*agentTask) Name() string          { return "agent" }
func (*agentTask) MaxTurns() int         { return 6 }
func (*agentTask) MaxTokensPerTurn() int { return 64 }
func (*agentTask) Sample(*rand.Rand) tasks.Prompt {
	return tasks.Prompt{ID: "agent-0", Text: "What is (2+3)*7?"}
}
func (*agentTask) NewEnv() tasks.Env         { return nil }
func (t *agentTask) NewChatEnv() chatenv.Env { return &agentEnv{t: t} }

type agentEnv struct {
	t      *agentTask
	closed bool
}

func (e *agentEnv) Reset(_ context.Context, p tasks.Prompt) (chatenv.Start, error) {
	return chatenv.Start{Tools: calcTools, Messages: []chatenv.Message{
		{Role: "system", Content: "You are a careful calculator agent."},
		{Role: "user", Content: p.Text}}}, nil
}

func (e *agentEnv) Step(ctx context.Context, a chatenv.Action) (chatenv.Result, error) {
	e.t.mu.Lock()
	e.t.steps = append(e.t.steps, a)
	e.t.mu.Unlock()
	if e.t.hang != nil {
		select {
		case <-ctx.Done():
		case <-e.t.hang:
		}
		return chatenv.Result{}, errors.New("hung")
	}
	if e.t.fail != nil {
		return chatenv.Result{}, e.t.fail
	}
	var out []chatenv.Message
	for _, c := range a.Message.ToolCalls {
		var args struct{ Expr string }
		_ = json.Unmarshal(c.Function.Arguments, &args)
		val := map[string]string{"2+3": "5", "5*7": "35"}[args.Expr]
		out = append(out, chatenv.Message{Role: "tool", ToolCallID: c.ID, Name: c.Function.Name, Content: val})
	}
	if len(out) > 0 {
		return chatenv.Result{Messages: out}, nil
	}
	if strings.Contains(a.Message.Content, "35") {
		return chatenv.Result{Reward: 1, Done: true}, nil
	}
	return chatenv.Result{Reward: -0.25, Messages: []chatenv.Message{{Role: "user", Content: "That is wrong, try again."}}}, nil
}

func (e *agentEnv) Close(context.Context) error { e.closed = true; return nil }

// testMessageChat is wiring's MessageChat (which this package
// cannot import: wiring imports it) in a few lines.
type testMessageChat struct{ c *chattemplate.Conversation }

func templateMsgs(msgs []chatenv.Message) []chattemplate.Message {
	var out []chattemplate.Message
	for _, m := range msgs {
		t := chattemplate.Message{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID, Name: m.Name}
		for _, c := range m.ToolCalls {
			t.ToolCalls = append(t.ToolCalls, chattemplate.ToolCall{ID: c.ID, Type: c.Type,
				Function: chattemplate.FunctionCall{Name: c.Function.Name, Arguments: c.Function.Arguments}})
		}
		out = append(out, t)
	}
	return out
}

func (m testMessageChat) OpenWith(msgs []chatenv.Message) ([]int32, error) {
	return m.c.OpenWith(templateMsgs(msgs)...)
}
func (m testMessageChat) ContinueWith(gen []int32, next []chatenv.Message) ([]int32, error) {
	return m.c.ContinueWith(gen, templateMsgs(next)...)
}

type testMessageFormat struct{ chatFormat }

func (f testMessageFormat) NewMessageChat(tools json.RawMessage) (MessageChat, error) {
	o := f.opts
	o.Tools = tools
	c, err := f.t.NewConversation(o)
	return testMessageChat{c}, err
}

// replyOutputs scripts the model: each reply's tokenizer ids plus EOS.
func replyOutputs(tok *chattemplate.Tokenizer, eos int32, replies []string) []TurnOutput {
	var outs []TurnOutput
	for k, r := range replies {
		ids := append(tok.Encode(r), eos)
		o := TurnOutput{Tokens: ids, Finish: "stop"}
		for range ids {
			o.Logprobs = append(o.Logprobs, -0.5)
			o.Versions = append(o.Versions, int64(k))
		}
		outs = append(outs, o)
	}
	return outs
}

// TestChatEnvEpisodeEqualsOneRender is the acceptance check of the chat
// environment contract on the real Qwen3 tokenizer and chat template: a
// 5-turn episode — two well-formed Hermes tool calls answered by tool
// messages, a malformed call answered by the rollout's error message, a
// wrong answer answered by a user message, the right answer — built
// token-in/token-out equals, token for token, rendering the whole
// conversation once (chattemplate.TrainingTokens over the messages the
// environment and the model exchanged), and its loss mask is exactly
// TrainingTokens' assistant mask: the model's replies and their
// <|im_end|>, nothing of the system, user, tool or template text. The
// environment got the parsed tool calls, the reward is the sum of the
// steps', the malformed call was counted and never reached it.
func TestChatEnvEpisodeEqualsOneRender(t *testing.T) {
	tok, err := chattemplate.LoadDir(realtok.Dir(t, realtok.Qwen3))
	if err != nil {
		t.Fatal(err)
	}
	eos, _ := tok.TokenID("<|im_end|>")
	replies := []string{
		"<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expr\": \"2+3\"}}\n</tool_call>",
		"Now the product.\n<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expr\": \"5*7\"}}\n</tool_call>",
		"<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expr\": }\n</tool_call>",
		"It is 36.",
		// Qwen3's template writes an empty think block into the last
		// assistant message after the last user query; the model wrote it.
		"<think>\n\n</think>\n\nIt is 35.",
	}
	gen := &scripted{outs: replyOutputs(tok, eos, replies)}
	task := &agentTask{}
	cfg := testCfg()
	cfg.MaxSeqLen = 4096
	cfg.Vocab = chatVocab{tok}
	cfg.Chat = testMessageFormat{chatFormat{t: tok}}
	cfg.ToolFormat = chatenv.ToolsHermes
	ep, err := RunEpisode(context.Background(), gen, task, task.Sample(nil), "agent/0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if ep.Turns != 5 || ep.Reward != 0.75 || ep.ToolCalls != 3 || ep.MalformedCalls != 1 {
		t.Fatalf("turns %d reward %v tool calls %d malformed %d, want 5, 0.75, 3, 1", ep.Turns, ep.Reward, ep.ToolCalls, ep.MalformedCalls)
	}
	if len(task.steps) != 4 {
		t.Fatalf("the environment saw %d steps, want 4 (the malformed turn never reaches it)", len(task.steps))
	}
	if c := task.steps[1].Message; c.Content != "Now the product." || len(c.ToolCalls) != 1 || string(c.ToolCalls[0].Function.Arguments) != `{"expr": "5*7"}` {
		t.Fatalf("step 2 action %+v", c)
	}

	// The conversation as one list of messages, rendered once.
	call := func(id, expr string) []chattemplate.ToolCall {
		return []chattemplate.ToolCall{{ID: id, Type: "function", Function: chattemplate.FunctionCall{Name: "calc", Arguments: json.RawMessage(`{"expr": "` + expr + `"}`)}}}
	}
	msgs := []chattemplate.Message{
		{Role: "system", Content: "You are a careful calculator agent."},
		{Role: "user", Content: "What is (2+3)*7?"},
		{Role: "assistant", ToolCalls: call("call_0", "2+3")},
		{Role: "tool", Content: "5", ToolCallID: "call_0", Name: "calc"},
		{Role: "assistant", Content: "Now the product.", ToolCalls: call("call_0", "5*7")},
		{Role: "tool", Content: "35", ToolCallID: "call_0", Name: "calc"},
		{Role: "assistant", Content: replies[2]},
		{Role: "tool", Name: "error", Content: malformedReplies([]chatenv.CallError{{Index: 0, Reason: task.badReason(t)}})[0].Content},
		{Role: "assistant", Content: "It is 36."},
		{Role: "user", Content: "That is wrong, try again."},
		{Role: "assistant", Content: replies[4]},
	}
	raw, err := chattemplate.MarshalMessages(msgs...)
	if err != nil {
		t.Fatal(err)
	}
	want, mask, err := tok.TrainingTokens(raw, calcTools, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The render ends with the "\n" the template writes after the last
	// <|im_end|>; the episode ends at the model's EOS (the engine stops
	// there), so that context token is the only difference.
	if n := len(want) - 1; n < 0 || tok.Decode(want[n:]) != "\n" || mask[n] != 0 {
		t.Fatalf("the render does not end with a context \"\\n\": %q", tok.Decode(want))
	}
	want, mask = want[:len(want)-1], mask[:len(mask)-1]
	if !slices.Equal(ep.Tokens, want) {
		t.Fatalf("token stream differs from one render:\n got %q\nwant %q", tok.Decode(ep.Tokens), tok.Decode(want))
	}
	if !slices.Equal(ep.LossMask, mask) {
		t.Fatalf("loss mask differs from the assistant mask:\n got %v\nwant %v", ep.LossMask, mask)
	}
	// And the masked tokens are exactly the scripted replies, in order.
	var got []int32
	for i, m := range ep.LossMask {
		if m == 1 {
			got = append(got, ep.Tokens[i])
		}
	}
	var sampled []int32
	for _, o := range gen.outs {
		sampled = append(sampled, o.Tokens...)
	}
	if !slices.Equal(got, sampled) {
		t.Fatalf("loss-masked tokens are not the sampled ones")
	}
}

// badReason is the reason ParseToolCalls gives the third reply's call.
func (*agentTask) badReason(t *testing.T) string {
	_, bad := chatenv.ParseToolCalls(chatenv.ToolsHermes, "<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expr\": }\n</tool_call>")
	if len(bad) != 1 {
		t.Fatalf("want one malformed call, got %v", bad)
	}
	return bad[0].Reason
}

// TestChatEnvFailures: an environment whose Step fails aborts the episode
// with ErrEnvFailed; one that hangs (ignoring nothing but honouring its
// context) is given up after EnvTimeout with ErrEnvTimeout; both wrap
// ErrAborted (the actor requeues the group) and the env is closed.
func TestChatEnvFailures(t *testing.T) {
	out := text("7", true, 0, "stop")
	for _, c := range []struct {
		name string
		task *agentTask
		want error
	}{
		{"error", &agentTask{fail: errors.New("tool server crashed")}, ErrEnvFailed},
		{"hang", &agentTask{hang: make(chan struct{})}, ErrEnvTimeout},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.task.hang != nil {
				defer close(c.task.hang)
			}
			cfg := testCfg()
			cfg.EnvTimeout = 50 * time.Millisecond
			gen := &scripted{outs: []TurnOutput{out}}
			_, err := RunEpisode(context.Background(), gen, c.task, c.task.Sample(nil), "a/0", cfg)
			if !errors.Is(err, ErrAborted) || !errors.Is(err, c.want) {
				t.Fatalf("err %v, want ErrAborted and %v", err, c.want)
			}
		})
	}
}
