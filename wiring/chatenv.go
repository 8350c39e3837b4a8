package wiring

import (
	"encoding/json"

	"github.com/asyncrl/asyncrl/actors/rollout"
	"github.com/asyncrl/asyncrl/model/chattemplate"
	"github.com/asyncrl/asyncrl/tasks/chatenv"
)

var _ rollout.MessageChatFormat = chatFormat{}

// NewMessageChat starts one chat environment's conversation, the tools
// the environment announced given to the template (Qwen3 puts them in its
// system preamble).
func (f chatFormat) NewMessageChat(tools json.RawMessage) (rollout.MessageChat, error) {
	opts := f.opts
	if len(tools) > 0 && string(tools) != "null" {
		opts.Tools = tools
	}
	c, err := f.tok.NewConversation(opts)
	if err != nil {
		return nil, err
	}
	return MessageChat{c}, nil
}

// MessageChat is a chattemplate.Conversation as a rollout.MessageChat:
// chatenv's messages in, the template's tokens out.
type MessageChat struct{ C *chattemplate.Conversation }

// OpenWith implements rollout.MessageChat.
func (m MessageChat) OpenWith(msgs []chatenv.Message) ([]int32, error) {
	return m.C.OpenWith(TemplateMessages(msgs)...)
}

// ContinueWith implements rollout.MessageChat.
func (m MessageChat) ContinueWith(generated []int32, next []chatenv.Message) ([]int32, error) {
	return m.C.ContinueWith(generated, TemplateMessages(next)...)
}

// TemplateMessages converts chat-environment messages to the template's.
func TemplateMessages(msgs []chatenv.Message) []chattemplate.Message {
	out := make([]chattemplate.Message, len(msgs))
	for i, m := range msgs {
		t := chattemplate.Message{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID, Name: m.Name}
		for _, c := range m.ToolCalls {
			t.ToolCalls = append(t.ToolCalls, chattemplate.ToolCall{ID: c.ID, Type: c.Type,
				Function: chattemplate.FunctionCall{Name: c.Function.Name, Arguments: c.Function.Arguments}})
		}
		out[i] = t
	}
	return out
}
