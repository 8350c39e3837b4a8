package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrNotChat wraps a tokenizer or template that cannot drive a chat episode.
var ErrNotChat = errors.New("chattemplate: not usable for chat rollouts")

// ConversationOptions configure the conversations of a run.
type ConversationOptions struct {
	// System is the system message every conversation starts with ("" =
	// none).
	System string
	// Template names the chat template ("" = Select's choice).
	Template string
	// Tools are tool definitions (JSON array) every render sees.
	Tools json.RawMessage
	// Vars are extra template variables (SkyRL's chat_template_kwargs, e.g.
	// enable_thinking).
	Vars map[string]any
	// Now is strftime_now's clock, fixed for the conversation so that a
	// date in the template cannot change between turns (the zero time:
	// the wall clock when the conversation is created).
	Now time.Time
}

// sentinel stands for an assistant message's content while rendering the
// text that follows it; it is chosen so no template logic (a "</think>"
// split, a "<tool_response>" test) reacts to it.
const sentinel = "\x00asyncrl-assistant-content\x00"

// Conversation builds one multi-turn chat episode token-in/token-out: the
// history is never re-tokenised, so the model's sampled tokens stay exactly
// as sampled and each turn only appends.
//
//   - Open renders [system?, user] with the generation prompt: the prompt.
//   - Continue is called after the model's turn with its generated ids and
//     the next observation. It renders the conversation so far with the
//     last assistant message's content replaced by a sentinel, followed by
//     the new message and the generation prompt, and takes the text after
//     the sentinel: what the template puts after an assistant message (the
//     "<|im_end|>\n" of ChatML), the new message, the generation prompt.
//     The part of it the model already generated — its final token when that
//     token's text starts the suffix (the EOS "<|im_end|>", Llama-3's
//     "<|eot_id|>") — is dropped; a turn cut by length gets the whole
//     closing as context. The rest is encoded and returned.
//
// This is the fixed-base trick of SkyRL's generator
// (skyrl-train/skyrl_train/generators/skyrl_gym_generator.py,
// _get_next_input_ids_with_multiturn_chat_template and base_conversation,
// NovaSky-AI/SkyRL@01632c346d22983a24a547cbd46b7462d75f90db), which renders
// a fixed [system, user] base plus the new messages and keeps the tokens
// after the base's last EOS. Rendering the real history instead of a fixed
// base keeps templates whose output depends on earlier messages right
// (DeepSeek-V3 renders an assistant reply after tool results differently);
// cutting at the sentinel instead of an EOS covers templates that put no
// EOS after user messages (DeepSeek-V3 again).
//
// A Conversation is not safe for concurrent use; one episode owns one.
type Conversation struct {
	tok  *Tokenizer
	tmpl *Template
	opts ConversationOptions
	msgs []Message
}

// NewConversation starts a conversation. It refuses a tokenizer without a
// chat template and a template whose generation prompt is empty (a rollout
// must cue the assistant turn), naming the fix.
func (t *Tokenizer) NewConversation(opts ConversationOptions) (*Conversation, error) {
	tmpl, err := t.Select(opts.Template, len(opts.Tools) > 0 && !isNull(opts.Tools))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotChat, err)
	}
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	c := &Conversation{tok: t, tmpl: tmpl, opts: opts}
	if opts.System != "" {
		c.msgs = append(c.msgs, Message{Role: "system", Content: opts.System})
	}
	return c, nil
}

// CheckChat verifies once (at start) that the tokenizer can drive chat
// episodes: it has a template, and the template's generation prompt is a
// non-empty extension of the same conversation rendered without it.
func (t *Tokenizer) CheckChat(opts ConversationOptions) error {
	c, err := t.NewConversation(opts)
	if err != nil {
		return err
	}
	probe := append(append([]Message(nil), c.msgs...), Message{Role: "user", Content: "probe"})
	without, err := c.render(probe, false)
	if err != nil {
		return err
	}
	with, err := c.render(probe, true)
	if err != nil {
		return err
	}
	if len(with) <= len(without) || !strings.HasPrefix(with, without) {
		return fmt.Errorf("%w: chat template %q of %s adds no generation prompt (add_generation_prompt changes nothing): a chat rollout must cue the assistant's turn; use an instruction-tuned model's tokenizer directory, or turn rollout.chat_template off", ErrNotChat, c.tmpl.Name, t.Dir)
	}
	return nil
}

func (c *Conversation) render(msgs []Message, gen bool) (string, error) {
	raw, err := MarshalMessages(msgs...)
	if err != nil {
		return "", err
	}
	vars := make(map[string]any, len(c.tok.Special)+len(c.opts.Vars))
	for k, v := range c.tok.Special {
		vars[k] = v
	}
	for k, v := range c.opts.Vars {
		vars[k] = v
	}
	return c.tmpl.Render(Input{Messages: raw, Tools: c.opts.Tools, AddGenerationPrompt: gen, Vars: vars, Now: c.opts.Now})
}

// Open returns the prompt's tokens: the system message (if any) and the
// first observation as a user message, rendered with the generation prompt.
func (c *Conversation) Open(observation string) ([]int32, error) {
	return c.OpenWith(Message{Role: "user", Content: observation})
}

// OpenWith is Open with any opening messages (a chat environment's
// system, user, … messages; they follow ConversationOptions.System when
// that is set): the messages rendered with the generation prompt.
func (c *Conversation) OpenWith(msgs ...Message) ([]int32, error) {
	if len(c.msgs) > 1 || len(c.msgs) == 1 && c.msgs[0].Role != "system" {
		return nil, fmt.Errorf("chattemplate: Open called twice")
	}
	if len(msgs) == 0 {
		return nil, fmt.Errorf("chattemplate: Open needs a message")
	}
	c.msgs = append(c.msgs, msgs...)
	text, err := c.render(c.msgs, true)
	if err != nil {
		return nil, err
	}
	return c.tok.Encode(text), nil
}

// Continue returns the context tokens that follow the assistant's turn
// (generated, exactly as sampled) when the next message is the user's
// observation.
func (c *Conversation) Continue(generated []int32, observation string) ([]int32, error) {
	return c.ContinueWith(generated, Message{Role: "user", Content: observation})
}

// ContinueWith is Continue with any next messages (tool results, …).
func (c *Conversation) ContinueWith(generated []int32, next ...Message) ([]int32, error) {
	if len(c.msgs) == 0 {
		return nil, fmt.Errorf("chattemplate: Continue before Open")
	}
	if len(next) == 0 {
		return nil, fmt.Errorf("chattemplate: Continue needs a next message")
	}
	msgs := append(append(append([]Message(nil), c.msgs...), Message{Role: "assistant", Content: sentinel}), next...)
	text, err := c.render(msgs, true)
	if err != nil {
		return nil, err
	}
	at := strings.Index(text, sentinel)
	if at < 0 || strings.Count(text, sentinel) != 1 {
		return nil, fmt.Errorf("%w: chat template %q does not render an assistant message's content once, as is: cannot tell what follows the model's turn", ErrNotChat, c.tmpl.Name)
	}
	suffix := text[at+len(sentinel):]
	if n := len(generated); n > 0 {
		if last, ok := c.tok.Token(generated[n-1]); ok && c.tok.IsAdded(generated[n-1]) && strings.HasPrefix(suffix, last) {
			suffix = suffix[len(last):]
		}
	}
	c.msgs = append(c.msgs, Message{Role: "assistant", Content: c.reply(generated)})
	c.msgs = append(c.msgs, next...)
	return c.tok.Encode(suffix), nil
}

// reply is the assistant message's content the later renders see: the
// generated text without a final EOS (the template writes its own).
func (c *Conversation) reply(generated []int32) string {
	if n := len(generated); n > 0 && c.tok.IsEOS(generated[n-1]) {
		generated = generated[:n-1]
	}
	return c.tok.Decode(generated)
}

// Messages returns the conversation so far (assistant contents as decoded
// text), e.g. for logging or for comparing with a full render.
func (c *Conversation) Messages() []Message { return append([]Message(nil), c.msgs...) }
