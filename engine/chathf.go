package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/asyncrl/asyncrl/model/chattemplate"
)

// UnmarshalJSON keeps the whole message for a chat template besides the
// role and content the character tokenizer's template reads.
func (m *ChatMessage) UnmarshalJSON(b []byte) error {
	var v struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	m.Role, m.Content, m.raw = v.Role, v.Content, append(json.RawMessage(nil), b...)
	return nil
}

// chatPrompt renders a chat request with the tokenizer's chat template as
// vLLM's chat endpoint does (vllm/entrypoints/chat_utils.py,
// vllm-project/vllm@bd5ec6d50b83652c21a570b81c1fb5219a6ebf76): a content
// given as a list of text parts becomes their texts joined with "\n" (the
// "string" content format), an assistant's tool-call arguments given as a
// JSON string become the object it holds (_postprocess_messages: templates
// expect a mapping; empty arguments become {}), an empty tool_calls list
// is dropped; add_generation_prompt defaults to true; the text is encoded
// without adding special tokens (the template spells them; vLLM's chat
// add_special_tokens defaults to false).
func (c hfCodec) chatPrompt(req *ChatRequest, _ bool) ([]int32, *reqError) {
	msgs := make([]json.RawMessage, len(req.Messages))
	for i, m := range req.Messages {
		if m.Role == "" {
			return nil, badRequest("messages", "messages[%d].role is required", i)
		}
		raw := m.raw
		if raw == nil { // built in Go, not decoded from a body
			b, err := json.Marshal(struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content,omitempty"`
			}{m.Role, m.Content})
			if err != nil {
				return nil, badRequest("messages", "messages[%d]: %v", i, err)
			}
			raw = b
		}
		norm, err := templateMessage(raw)
		if err != nil {
			return nil, badRequest("messages", "messages[%d]: %v", i, err)
		}
		msgs[i] = norm
	}
	list, _ := json.Marshal(msgs)
	in := chattemplate.Input{Messages: list, Tools: req.Tools, AddGenerationPrompt: true, Vars: map[string]any{}, Now: time.Now()}
	if req.AddGenerationPrompt != nil {
		in.AddGenerationPrompt = *req.AddGenerationPrompt
	}
	for k, v := range req.ChatTemplateKwargs {
		in.Vars[k] = v
	}
	ids, _, err := c.t.RenderIDs("", in)
	if err != nil {
		return nil, badRequest("messages", "chat template: %v", err)
	}
	return ids, nil
}

// field is one key of a JSON object, in order.
type field struct {
	key string
	val json.RawMessage
}

// objectFields splits a JSON object into its fields, keeping their order.
func objectFields(raw json.RawMessage) ([]field, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("must be a JSON object")
	}
	var out []field
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, field{k.(string), v})
	}
	return out, nil
}

func marshalFields(fs []field) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range fs {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(f.key)
		b.Write(k)
		b.WriteByte(':')
		b.Write(f.val)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// templateMessage applies vLLM's message normalisation (see chatPrompt).
func templateMessage(raw json.RawMessage) (json.RawMessage, error) {
	fs, err := objectFields(raw)
	if err != nil {
		return nil, err
	}
	out := fs[:0]
	role := ""
	for _, f := range fs {
		if f.key == "role" {
			_ = json.Unmarshal(f.val, &role)
		}
	}
	for _, f := range fs {
		switch f.key {
		case "content":
			if len(f.val) > 0 && f.val[0] == '[' {
				if _, ok := messageText(f.val); !ok {
					return nil, fmt.Errorf("content must be a string or a list of text parts")
				}
				joined, _ := json.Marshal(joinedText(f.val))
				f.val = joined
			}
		case "tool_calls":
			if role != "assistant" {
				break
			}
			calls, drop, err := toolCallObjects(f.val)
			if err != nil {
				return nil, err
			}
			if drop {
				continue
			}
			f.val = calls
		}
		out = append(out, f)
	}
	return marshalFields(out), nil
}

// joinedText joins a list of text parts with "\n" (messageText, which the
// character template uses, joins them with nothing).
func joinedText(raw json.RawMessage) string {
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	var b bytes.Buffer
	for i, p := range parts {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.Text)
	}
	return b.String()
}

// toolCallObjects parses each call's string arguments into the JSON they
// hold; drop reports an empty list.
func toolCallObjects(raw json.RawMessage) (json.RawMessage, bool, error) {
	var calls []json.RawMessage
	if err := json.Unmarshal(raw, &calls); err != nil {
		return raw, false, nil // not a list: left to the template, as vLLM does
	}
	if len(calls) == 0 {
		return nil, true, nil
	}
	for i, c := range calls {
		fs, err := objectFields(c)
		if err != nil {
			return nil, false, fmt.Errorf("tool_calls[%d]: %w", i, err)
		}
		for j, f := range fs {
			if f.key != "function" {
				continue
			}
			fn, err := objectFields(f.val)
			if err != nil {
				return nil, false, fmt.Errorf("tool_calls[%d].function: %w", i, err)
			}
			for k, a := range fn {
				if a.key != "arguments" {
					continue
				}
				var s string
				switch {
				case string(a.val) == "null" || string(a.val) == `""`:
					fn[k].val = json.RawMessage(`{}`)
				case json.Unmarshal(a.val, &s) == nil:
					if !json.Valid([]byte(s)) {
						return nil, false, fmt.Errorf("tool_calls[%d].function.arguments is not JSON: %q", i, s)
					}
					fn[k].val = json.RawMessage(s)
				}
			}
			fs[j].val = marshalFields(fn)
		}
		calls[i] = marshalFields(fs)
	}
	b, _ := json.Marshal(calls)
	return b, false, nil
}
