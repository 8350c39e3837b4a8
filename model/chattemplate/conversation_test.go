package chattemplate

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/internal/realtok"
)

// charTokens encodes s one character at a time: a tokenization the
// tokenizer would never produce for s as a whole, as a sampled answer may be.
func charTokens(tok *Tokenizer, s string) []int32 {
	var ids []int32
	for _, r := range s {
		ids = append(ids, tok.Encode(string(r))...)
	}
	return ids
}

// episode plays a 5-turn chat through a Conversation: the model's turns are
// replies[k] (tokenized character by character) ending in the template's
// end-of-turn token, except turn cutAt which is cut by length (no EOS).
// It returns the token stream, the loss mask (1 on generated tokens) and
// the generated spans.
type span struct{ start, end int }

func playEpisode(t *testing.T, tok *Tokenizer, eos int32, system string, replies, observations []string, cutAt int) (*Conversation, []int32, []uint8, []span) {
	t.Helper()
	conv, err := tok.NewConversation(ConversationOptions{System: system, Now: refNow})
	if err != nil {
		t.Fatal(err)
	}
	var stream []int32
	var mask []uint8
	var spans []span
	add := func(ids []int32, m uint8) {
		stream = append(stream, ids...)
		for range ids {
			mask = append(mask, m)
		}
	}
	ctx, err := conv.Open(observations[0])
	if err != nil {
		t.Fatal(err)
	}
	add(ctx, 0)
	for k, reply := range replies {
		gen := charTokens(tok, reply)
		if k != cutAt {
			gen = append(gen, eos)
		}
		spans = append(spans, span{len(stream), len(stream) + len(gen)})
		add(gen, 1)
		if k == len(replies)-1 {
			break // the environment ends the episode after the last turn
		}
		ctx, err := conv.Continue(gen, observations[k+1])
		if err != nil {
			t.Fatalf("turn %d: %v", k, err)
		}
		if len(ctx) == 0 {
			t.Fatalf("turn %d: no context tokens", k)
		}
		add(ctx, 0)
		// Every prompt the engine sees is the template's rendering of the
		// conversation so far, with the generation prompt.
		want, err := conv.render(conv.Messages(), true)
		if err != nil {
			t.Fatal(err)
		}
		if got := tok.Decode(stream); got != want {
			t.Fatalf("turn %d: the stream decodes to\n %q\nthe template renders\n %q", k, got, want)
		}
	}
	return conv, stream, mask, spans
}

// TestConversationMatchesFullRender: for Qwen3, Llama-3.1 and DeepSeek-V3, a
// 5-turn episode built token-in/token-out equals rendering the whole
// conversation once with the template: the stream decodes to the render,
// and with each generated span re-encoded canonically it is exactly the
// render's tokens — every context token is what tokenizing the full
// conversation gives, the generated ones stay as sampled. The loss mask
// covers exactly the generated tokens (the assistant content and its EOS);
// a turn cut by length gets the template's end-of-turn token as context.
func TestConversationMatchesFullRender(t *testing.T) {
	replies := []string{"Hi there.", "I think 42.", "Because 6*7=42", "Sure: red, green and blue.", "Goodbye!"}
	observations := []string{"Hello, who are you?", "What is the answer?", "Why?", "Name three colours.", "Thanks, bye."}
	cases := []struct {
		name, eos string
		// fullRender: the template renders the final assistant message as
		// it was generated (Qwen3 wraps the last one, after the last user
		// query, in an empty <think> block, which the model at generation
		// time had not seen, so only the prompts are compared for it).
		fullRender bool
	}{
		{realtok.Qwen3, "<|im_end|>", false},
		{realtok.Llama31, "<|eot_id|>", true},
		{realtok.DeepSeekV3, "<｜end▁of▁sentence｜>", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tok := loadRealDir(t, c.name)
			eos, ok := tok.TokenID(c.eos)
			if !ok || !tok.IsEOS(eos) {
				t.Fatalf("%s is not the EOS", c.eos)
			}
			conv, stream, mask, spans := playEpisode(t, tok, eos, "Be brief.", replies, observations, 2)
			msgs := conv.Messages()
			// The conversation as the template sees it: system, then user and
			// assistant alternating, assistant contents without their EOS.
			if len(msgs) != 1+2*len(replies)-1 || msgs[len(msgs)-1].Role != "user" {
				t.Fatalf("messages %+v", msgs)
			}
			for k, r := range replies[:len(replies)-1] {
				if m := msgs[2+2*k]; m.Role != "assistant" || m.Content != r {
					t.Fatalf("message %d = %+v, want assistant %q", 2+2*k, m, r)
				}
			}
			// Full render: prompts up to the last generation prompt plus the
			// last generated turn.
			lastPrompt, err := conv.render(msgs, true)
			if err != nil {
				t.Fatal(err)
			}
			last := spans[len(spans)-1]
			if got, want := tok.Decode(stream), lastPrompt+tok.Decode(stream[last.start:last.end]); got != want {
				t.Fatalf("stream %q\nwant    %q", got, want)
			}
			full := append(msgs, Message{Role: "assistant", Content: replies[len(replies)-1]})
			fullText, err := conv.render(full, false)
			if err != nil {
				t.Fatal(err)
			}
			if c.fullRender {
				if got := tok.Decode(stream); got != fullText {
					t.Fatalf("stream %q\nfull render %q", got, fullText)
				}
				// Canonical tokens: re-encode each generated span (without its
				// EOS, which is one added token either way).
				var canon []int32
				prev := 0
				for _, s := range spans {
					canon = append(canon, stream[prev:s.start]...)
					end := s.end
					if stream[end-1] == eos {
						end--
					}
					canon = append(canon, tok.Encode(tok.Decode(stream[s.start:end]))...)
					canon = append(canon, stream[end:s.end]...)
					prev = s.end
				}
				if want := tok.Encode(fullText); !slices.Equal(canon, want) {
					t.Fatalf("canonical stream differs from the full render's tokens:\n got  %v\n want %v", canon, want)
				}
			}
			// Loss mask: exactly the generated spans.
			for i, m := range mask {
				in := false
				for _, s := range spans {
					in = in || i >= s.start && i < s.end
				}
				if (m == 1) != in {
					t.Fatalf("mask[%d] = %d, generated = %v", i, m, in)
				}
			}
			// The turn cut by length (2) has no EOS: the context after it
			// starts with the template's end-of-turn token; after a turn
			// that generated its EOS the context does not repeat it.
			if after := stream[spans[2].end]; after != eos {
				t.Errorf("after the cut turn the context starts with %d, want the EOS %d", after, eos)
			}
			if after := stream[spans[1].end]; after == eos {
				t.Errorf("after a turn ending in EOS the context repeats the EOS")
			}
		})
	}
}

// TestConversationRefusals: a tokenizer without a chat template, and a
// template that adds no generation prompt, are refused naming the fix.
func TestConversationRefusals(t *testing.T) {
	noTmpl, err := LoadDir(tokDir(t, map[string]string{"tokenizer_config.json": `{"eos_token": "<|im_end|>"}`}))
	if err != nil {
		t.Fatal(err)
	}
	if err := noTmpl.CheckChat(ConversationOptions{}); !errors.Is(err, ErrNotChat) || !strings.Contains(err.Error(), "chat_template") {
		t.Errorf("no template: %v", err)
	}
	b, _ := json.Marshal(map[string]string{"chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"})
	noGen, err := LoadDir(tokDir(t, map[string]string{"tokenizer_config.json": string(b)}))
	if err != nil {
		t.Fatal(err)
	}
	if err := noGen.CheckChat(ConversationOptions{}); !errors.Is(err, ErrNotChat) || !strings.Contains(err.Error(), "adds no generation prompt") {
		t.Errorf("no generation prompt: %v", err)
	}
	ok, err := LoadDir(tokDir(t, map[string]string{"tokenizer_config.json": `{"chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"}`}))
	if err != nil {
		t.Fatal(err)
	}
	if err := ok.CheckChat(ConversationOptions{System: "s"}); err != nil {
		t.Errorf("a ChatML template: %v", err)
	}
	// A template that drops assistant contents cannot say what follows a turn.
	b, _ = json.Marshal(map[string]string{"chat_template": "{% for m in messages %}{% if m.role == 'user' %}U:{{ m.content }}\n{% endif %}{% endfor %}{% if add_generation_prompt %}A:{% endif %}"})
	drop, err := LoadDir(tokDir(t, map[string]string{"tokenizer_config.json": string(b)}))
	if err != nil {
		t.Fatal(err)
	}
	conv, err := drop.NewConversation(ConversationOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conv.Open("hi"); err != nil {
		t.Fatal(err)
	}
	if _, err := conv.Continue(drop.Encode("hello"), "again"); !errors.Is(err, ErrNotChat) {
		t.Errorf("content-dropping template: %v", err)
	}
}
