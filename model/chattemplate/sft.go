package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrNotPrefixConsistent wraps a conversation whose rendering cannot be cut
// into per-turn prompts and answers (see TrainingTokens).
var ErrNotPrefixConsistent = errors.New("chattemplate: rendering is not prefix-consistent")

// TrainingTokens renders a conversation for supervised fine-tuning: the ids
// of the whole conversation (add_generation_prompt false) and a loss mask
// that is 1 exactly on what the model generates — each assistant message's
// tokens from the end of its generation prompt through the first EOS after
// it (its content, any reasoning or tool-call text the template writes for
// it, and the end-of-turn token), 0 on everything else, including what the
// template puts after that EOS (ChatML's "\n"), which the model never
// generates: the engine stops at the EOS. That is exactly the mask of the
// same turn in an RL rollout (SkyRL's multi-turn generator masks the
// generated ids with their EOS and makes the "\n" after it observation,
// skyrl-train/skyrl_train/generators/skyrl_gym_generator.py,
// NovaSky-AI/SkyRL@01632c346d22983a24a547cbd46b7462d75f90db), so SFT and RL
// train the same tokens of a turn. TRL's assistant_only_loss
// (apply_chat_template's return_assistant_tokens_mask over the template's
// {% generation %} spans) marks the same content and <|im_end|> and also the
// "\n" after it and the one after "<|im_start|>assistant" (its
// trl/chat_templates/qwen2_5_training.jinja,
// huggingface/trl@7f1ec8cf0d5400c37f108be7ac08ee0c76759861); here those are
// context. The spans are found without generation tags, which real
// templates such as Qwen3's do not have.
//
// The cut needs the rendering to be prefix-consistent: for every assistant
// message i, rendering messages[:i] with the generation prompt — the prompt
// the model sees when it writes message i — must be a prefix of the full
// rendering, in text and in tokens. A conversation that is not (a template
// that renders an earlier message differently once later ones follow, so
// the model would be trained on a prompt it is never shown) is refused with
// ErrNotPrefixConsistent naming the message; so is one whose assistant
// message is not closed by an EOS (nothing would teach the model to stop)
// and one without assistant messages.
func (t *Tokenizer) TrainingTokens(messages, tools json.RawMessage, vars map[string]any) ([]int32, []uint8, error) {
	var msgs []json.RawMessage
	if err := json.Unmarshal(messages, &msgs); err != nil {
		return nil, nil, fmt.Errorf("%w: messages must be a JSON array: %w", ErrInput, err)
	}
	in := Input{Messages: messages, Tools: tools, Vars: vars}
	ids, full, err := t.RenderIDs("", in)
	if err != nil {
		return nil, nil, err
	}
	if len(t.EOS) == 0 {
		return nil, nil, fmt.Errorf("%w: %s has no EOS (eos_token or generation_config.json's eos_token_id): cannot tell where an assistant turn ends", ErrNotChat, t.Dir)
	}
	mask := make([]uint8, len(ids))
	assistants := 0
	for i, raw := range msgs {
		var m struct {
			Role string `json:"role"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, nil, fmt.Errorf("%w: messages[%d]: %w", ErrInput, i, err)
		}
		if m.Role != "assistant" {
			continue
		}
		assistants++
		start, end, err := t.answerSpan(in, msgs, i, ids, full)
		if err != nil {
			return nil, nil, err
		}
		for k := start; k < end; k++ {
			if mask[k] == 1 {
				return nil, nil, fmt.Errorf("%w: messages[%d]'s answer overlaps the one before it: the template closes the earlier assistant turn with no EOS", ErrNotPrefixConsistent, i)
			}
			mask[k] = 1
		}
	}
	if assistants == 0 {
		return nil, nil, fmt.Errorf("%w: no assistant message: nothing to train on", ErrInput)
	}
	return ids, mask, nil
}

// answerSpan returns the token span [start, end) of assistant message i
// in the whole rendering ids (text full): from the end of its prompt
// (messages[:i] with the generation prompt) through the first EOS after it.
func (t *Tokenizer) answerSpan(in Input, msgs []json.RawMessage, i int, ids []int32, full string) (start, end int, err error) {
	prefixMsgs, _ := json.Marshal(msgs[:i])
	pin := in
	pin.Messages, pin.AddGenerationPrompt = prefixMsgs, true
	pids, ptext, err := t.RenderIDs("", pin)
	if err != nil {
		return 0, 0, err
	}
	if !strings.HasPrefix(full, ptext) || len(pids) > len(ids) || !slices.Equal(ids[:len(pids)], pids) {
		return 0, 0, fmt.Errorf("%w: the prompt of messages[%d] (messages[:%d] with the generation prompt) is not a prefix of the whole conversation's rendering: the template renders earlier messages differently once later ones follow; split the conversation at messages[%d] into rows of their own", ErrNotPrefixConsistent, i, i, i)
	}
	end = -1
	for k := len(pids); k < len(ids); k++ {
		if t.IsEOS(ids[k]) {
			end = k + 1
			break
		}
	}
	if end < 0 {
		return 0, 0, fmt.Errorf("%w: messages[%d] (assistant) is not followed by an EOS in the rendering: the template does not close this turn, so nothing would teach the model to stop", ErrNotPrefixConsistent, i)
	}
	// The EOS must close this message, not a later one: the answer
	// holds no later message's content — unless this message holds it
	// too (a tool call "24-12" answered "12"), which tells nothing.
	answer := t.Decode(ids[len(pids):end])
	if i+1 < len(msgs) {
		var next struct {
			Content any `json:"content"`
		}
		_ = json.Unmarshal(msgs[i+1], &next)
		if c, ok := next.Content.(string); ok && strings.TrimSpace(c) != "" && strings.Contains(answer, c) && !strings.Contains(string(msgs[i]), c) {
			return 0, 0, fmt.Errorf("%w: messages[%d] (assistant) is not closed by an EOS before messages[%d] starts: the template does not close this turn, so nothing would teach the model to stop", ErrNotPrefixConsistent, i, i+1)
		}
	}
	return len(pids), end, nil
}

// ChatTokens is TrainingTokens with the default template and no extra
// variables: what sft/data's Pretokenize calls for a chat JSONL row.
func (t *Tokenizer) ChatTokens(messages, tools json.RawMessage) ([]int32, []uint8, error) {
	return t.TrainingTokens(messages, tools, nil)
}
