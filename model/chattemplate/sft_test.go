package chattemplate

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/internal/realtok"
)

// spans decodes the runs of mask 1.
func spans(tok *Tokenizer, ids []int32, mask []uint8) []string {
	var out []string
	for i := 0; i < len(ids); {
		if mask[i] == 0 {
			i++
			continue
		}
		j := i
		for j < len(ids) && mask[j] == 1 {
			j++
		}
		out = append(out, tok.Decode(ids[i:j]))
		i = j
	}
	return out
}

// TestTrainingTokensQwen3: on the real Qwen3 template the ids are the whole
// conversation's rendering and the loss mask covers exactly each assistant
// turn from the end of its generation prompt through its <|im_end|> — the
// content, the tool-call text and the (empty or given) think block the
// template writes for the last turn — and not the "\n" after <|im_end|>, the
// system, user or tool messages, or the generation prompts.
func TestTrainingTokensQwen3(t *testing.T) {
	tok := loadRealDir(t, realtok.Qwen3)
	cases := []struct {
		name, messages, tools string
		want                  []string
	}{
		{"multi-turn", `[{"role":"system","content":"Be brief."},{"role":"user","content":"What is 3*7?"},{"role":"assistant","content":"21."},{"role":"user","content":"And 21+1?"},{"role":"assistant","content":"22."}]`, "",
			[]string{"21.<|im_end|>", "<think>\n\n</think>\n\n22.<|im_end|>"}},
		{"tools", `[{"role":"user","content":"Weather in Paris?"},{"role":"assistant","content":"","tool_calls":[{"type":"function","function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},{"role":"tool","name":"get_weather","content":"18C"},{"role":"assistant","content":"It is 18C."}]`,
			`[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`,
			[]string{"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>", "<think>\n\n</think>\n\nIt is 18C.<|im_end|>"}},
		{"reasoning", `[{"role":"user","content":"2+2?"},{"role":"assistant","reasoning_content":"Add.","content":"4"}]`, "",
			[]string{"<think>\nAdd.\n</think>\n\n4<|im_end|>"}},
		{"trailing user", `[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"bye"}]`, "",
			[]string{"hello<|im_end|>"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var tools json.RawMessage
			if c.tools != "" {
				tools = json.RawMessage(c.tools)
			}
			ids, mask, err := tok.ChatTokens(json.RawMessage(c.messages), tools)
			if err != nil {
				t.Fatal(err)
			}
			want, _, err := tok.RenderIDs("", Input{Messages: json.RawMessage(c.messages), Tools: tools})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ids, want) || len(mask) != len(ids) {
				t.Fatalf("ids are not the full render's")
			}
			if got := spans(tok, ids, mask); !slices.Equal(got, c.want) {
				t.Fatalf("trained spans %q\nwant %q", got, c.want)
			}
		})
	}
}

// On Llama-3.1 and DeepSeek-V3 each answer ends with the model's own EOS.
func TestTrainingTokensOtherFamilies(t *testing.T) {
	msgs := json.RawMessage(`[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"bye"},{"role":"assistant","content":"ciao"}]`)
	for name, want := range map[string][]string{
		realtok.Llama31:    {"hello<|eot_id|>", "ciao<|eot_id|>"},
		realtok.DeepSeekV3: {"hello<｜end▁of▁sentence｜>", "ciao<｜end▁of▁sentence｜>"},
	} {
		tok := loadRealDir(t, name)
		ids, mask, err := tok.ChatTokens(msgs, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := spans(tok, ids, mask); !slices.Equal(got, want) {
			t.Errorf("%s: spans %q, want %q", name, got, want)
		}
	}
}

// TestTrainingTokensRefusals: a template whose rendering of earlier
// messages changes once later ones follow, a turn the template does not
// close with an EOS, and a conversation without an assistant message are
// refused with the reason.
func TestTrainingTokensRefusals(t *testing.T) {
	mk := func(tmpl string) *Tokenizer {
		b, _ := json.Marshal(map[string]string{"chat_template": tmpl, "eos_token": "<|im_end|>"})
		tok, err := LoadDir(tokDir(t, map[string]string{"tokenizer_config.json": string(b)}))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	two := json.RawMessage(`[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"more"},{"role":"assistant","content":"sure"}]`)
	// The last message gets a "!" — so every prompt differs from the full text.
	inconsistent := mk("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}{% if loop.last %}!{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
	if _, _, err := inconsistent.ChatTokens(two, nil); !errors.Is(err, ErrNotPrefixConsistent) || !strings.Contains(err.Error(), "messages[1]") {
		t.Errorf("inconsistent: %v", err)
	}
	// Assistant turns without <|im_end|>: the first EOS after "hello" is the
	// user's, so the answer would swallow the next message.
	unclosed := mk("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}{% if m.role != 'assistant' %}<|im_end|>{% endif %}\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
	if _, _, err := unclosed.ChatTokens(two, nil); !errors.Is(err, ErrNotPrefixConsistent) || !strings.Contains(err.Error(), "not closed by an EOS") {
		t.Errorf("unclosed: %v", err)
	}
	ok := mk("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
	if _, _, err := ok.ChatTokens(json.RawMessage(`[{"role":"user","content":"hi"}]`), nil); !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "no assistant message") {
		t.Errorf("no assistant: %v", err)
	}
	if ids, mask, err := ok.ChatTokens(two, nil); err != nil || len(spans(ok, ids, mask)) != 2 {
		t.Errorf("a consistent ChatML template: %v", err)
	}
	// A reply that repeats part of the answer ("24-12" → "12") is no sign
	// of an unclosed turn.
	echo := json.RawMessage(`[{"role":"user","content":"hi"},{"role":"assistant","content":"24-12"},{"role":"user","content":"12"},{"role":"assistant","content":"12"}]`)
	if ids, mask, err := ok.ChatTokens(echo, nil); err != nil || !slices.Equal(spans(ok, ids, mask), []string{"24-12<|im_end|>", "12<|im_end|>"}) {
		t.Errorf("a reply echoing the answer: %v", err)
	}
}
