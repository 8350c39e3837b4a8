package chattemplate

import (
	"encoding/json"
	"fmt"
)

// Message is one chat message in the shape transformers' templates read
// (the OpenAI chat format): role, content, and for assistant messages
// tool_calls and reasoning_content; tool results have role "tool" and name
// the call they answer (ToolCallID, Name).
//
// Content is always sent as a string ("" when empty). A template that tests
// `content is none` (DeepSeek-V3's tool-call messages) needs a JSON null:
// give such messages to Input.Messages as JSON instead (every entry point —
// the CLI, the engine, SFT rows — passes the caller's JSON through as is).
type Message struct {
	Role             string     `json:"role"`
	Content          string     `json:"content"`
	ReasoningContent string     `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID       string     `json:"tool_call_id,omitempty"`
	Name             string     `json:"name,omitempty"`
}

// ToolCall is an assistant's call of a tool: {"type": "function",
// "function": {"name", "arguments"}}.
type ToolCall struct {
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and its arguments. Arguments is JSON: an
// object (what transformers' templates expect; Qwen3 prints it with tojson,
// in the key order given) or a string holding JSON (the OpenAI API's form,
// which DeepSeek-V3's template concatenates as text).
type FunctionCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// MarshalMessages encodes messages as the JSON array Input.Messages takes.
func MarshalMessages(msgs ...Message) (json.RawMessage, error) {
	for i, m := range msgs {
		if m.Role == "" {
			return nil, fmt.Errorf("%w: messages[%d].role is empty", ErrInput, i)
		}
		for j, c := range m.ToolCalls {
			if len(c.Function.Arguments) > 0 && !json.Valid(c.Function.Arguments) {
				return nil, fmt.Errorf("%w: messages[%d].tool_calls[%d].function.arguments is not JSON", ErrInput, i, j)
			}
		}
	}
	if msgs == nil {
		msgs = []Message{}
	}
	b, err := json.Marshal(msgs)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInput, err)
	}
	return b, nil
}
