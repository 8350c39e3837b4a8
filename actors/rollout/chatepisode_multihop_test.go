package rollout

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/internal/realtok"
	"github.com/asyncrl/asyncrl/model/chattemplate"
	"github.com/asyncrl/asyncrl/tasks"
	"github.com/asyncrl/asyncrl/tasks/chatenv"
	"github.com/asyncrl/asyncrl/tasks/multihop"
)

// TestMultihopEpisode drives an episode of the multi-hop retrieval
// environment through the real rollout path (RunEpisode on the registered
// task, the real Qwen3 tokenizer and chat template with the environment's
// search and lookup tools in its preamble, Hermes calls parsed from the
// model's tokens): search for the question's subject, look up its
// document, look up the document it names, answer. The environment
// answered each call with the corpus' own results, the verifier scored the
// exact answer 1, and the token stream equals rendering the whole
// conversation once, with the loss mask exactly the model's turns — the
// same acceptance as TestChatEnvEpisodeEqualsOneRender, on this
// environment's messages.
func TestMultihopEpisode(t *testing.T) {
	tok, err := chattemplate.LoadDir(realtok.Dir(t, realtok.Qwen3))
	if err != nil {
		t.Fatal(err)
	}
	eos, _ := tok.TokenID("<|im_end|>")
	task, err := tasks.Get("multihop")
	if err != nil {
		t.Fatal(err)
	}
	corpus := task.(*multihop.Task).Corpus()
	p := task.Sample(rand.New(rand.NewPCG(7, 8)))
	q := corpus.Questions[p.Seed]
	hermes := func(name, key, value string) string {
		return "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": {\"" + key + "\": \"" + value + "\"}}\n</tool_call>"
	}
	replies := []string{
		hermes("search", "query", q.Hops[0]),
		hermes("lookup", "title", q.Hops[0]),
		hermes("lookup", "title", q.Hops[1]),
		"<think>\n\n</think>\n\n" + q.Answer,
	}
	gen := &scripted{outs: replyOutputs(tok, eos, replies)}
	cfg := testCfg()
	cfg.MaxSeqLen = 4096
	cfg.Vocab = chatVocab{tok}
	cfg.Chat = testMessageFormat{chatFormat{t: tok}}
	cfg.ToolFormat = chatenv.ToolsHermes
	ep, err := RunEpisode(context.Background(), gen, task, p, "multihop/0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if ep.Turns != 4 || ep.Reward != 1 || ep.ToolCalls != 3 || ep.MalformedCalls != 0 {
		t.Fatalf("turns %d reward %v tool calls %d malformed %d, want 4, 1, 3, 0", ep.Turns, ep.Reward, ep.ToolCalls, ep.MalformedCalls)
	}

	// The conversation, from the corpus directly.
	first, _ := corpus.Lookup(q.Hops[0])
	second, _ := corpus.Lookup(q.Hops[1])
	call := func(name, key, value string) []chattemplate.ToolCall {
		args, _ := json.Marshal(map[string]string{key: value})
		return []chattemplate.ToolCall{{ID: "call_0", Type: "function", Function: chattemplate.FunctionCall{Name: name,
			Arguments: json.RawMessage(strings.Replace(string(args), `":"`, `": "`, 1))}}}
	}
	msgs := []chattemplate.Message{
		{Role: "system", Content: multihop.DefaultConfig().System},
		{Role: "user", Content: q.Text},
		{Role: "assistant", ToolCalls: call("search", "query", q.Hops[0])},
		{Role: "tool", Content: strings.Join(corpus.Search(q.Hops[0], 3), "\n"), ToolCallID: "call_0", Name: "search"},
		{Role: "assistant", ToolCalls: call("lookup", "title", q.Hops[0])},
		{Role: "tool", Content: first.Text, ToolCallID: "call_0", Name: "lookup"},
		{Role: "assistant", ToolCalls: call("lookup", "title", q.Hops[1])},
		{Role: "tool", Content: second.Text, ToolCallID: "call_0", Name: "lookup"},
		{Role: "assistant", Content: replies[3]},
	}
	raw, err := chattemplate.MarshalMessages(msgs...)
	if err != nil {
		t.Fatal(err)
	}
	want, mask, err := tok.TrainingTokens(raw, multihop.Tools, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The render ends with the "\n" after the last <|im_end|>, where the
	// episode stopped (see TestChatEnvEpisodeEqualsOneRender).
	want, mask = want[:len(want)-1], mask[:len(mask)-1]
	if !slices.Equal(ep.Tokens, want) {
		t.Fatalf("token stream differs from one render:\n got %q\nwant %q", tok.Decode(ep.Tokens), tok.Decode(want))
	}
	if !slices.Equal(ep.LossMask, mask) {
		t.Fatalf("loss mask differs from the assistant mask")
	}
	if ctx := tok.Decode(ep.Tokens[ep.PromptLen:]); !strings.Contains(ctx, first.Text) || !strings.Contains(ctx, second.Text) {
		t.Fatalf("the documents are not in the trajectory: %q", ctx)
	}
}
