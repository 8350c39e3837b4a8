package rollout

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/internal/realtok"
	"github.com/asyncrl/asyncrl/model/chattemplate"
	"github.com/asyncrl/asyncrl/tasks"
)

// talkTask is a five-turn task whose observations echo the model's text.
type talkTask struct{}

func (talkTask) Name() string          { return "talk" }
func (talkTask) MaxTurns() int         { return 5 }
func (talkTask) MaxTokensPerTurn() int { return 64 }
func (talkTask) Sample(*rand.Rand) tasks.Prompt {
	return tasks.Prompt{ID: "talk-0", Text: "Hello, who are you?"}
}
func (talkTask) NewEnv() tasks.Env { return &talkEnv{} }

type talkEnv struct {
	turn    int
	actions []string
}

func (e *talkEnv) Reset(p tasks.Prompt) (string, error) { return p.Text, nil }
func (e *talkEnv) Step(action string) (string, float64, bool, error) {
	e.actions = append(e.actions, action)
	e.turn++
	return fmt.Sprintf("Turn %d: you said %q.", e.turn, action), 0.25, e.turn == 5, nil
}

// chatVocab is the Vocabulary of an HF tokenizer as wiring builds it.
type chatVocab struct{ t *chattemplate.Tokenizer }

func (v chatVocab) Encode(s string) []int32 { return v.t.Encode(s) }
func (v chatVocab) Decode(ids []int32) string {
	return v.t.DecodeSkipSpecial(ids)
}
func (v chatVocab) Prefix() []int32     { return nil }
func (v chatVocab) IsEOS(id int32) bool { return v.t.IsSpecial(id) }
func (v chatVocab) Size() int32         { return int32(v.t.VocabSize()) }

type chatFormat struct {
	t    *chattemplate.Tokenizer
	opts chattemplate.ConversationOptions
}

func (f chatFormat) NewChat() (Chat, error) { return f.t.NewConversation(f.opts) }

// TestChatEpisodeTokenInTokenOut: a 5-turn episode of a chat model (the
// real Llama-3.1 and Qwen3 tokenizers and templates) through RunEpisode:
// every call's prompt is the template's rendering of the conversation so
// far (never a re-tokenisation of the history: each call's tokens extend
// the previous call's plus its output), the whole trajectory is the
// template's rendering of the whole conversation, the generated tokens are
// in it exactly as sampled (one character per token here, not the
// tokenizer's own split) and are the only tokens with loss mask 1, and the
// environment reads the model's text without the end-of-turn token.
func TestChatEpisodeTokenInTokenOut(t *testing.T) {
	replies := []string{"I am a bot.", "Yes.", "No, 42", "Red, green.", "Bye!"}
	for _, c := range []struct{ name, eos string }{{realtok.Llama31, "<|eot_id|>"}, {realtok.Qwen3, "<|im_end|>"}} {
		t.Run(c.name, func(t *testing.T) {
			tok, err := chattemplate.LoadDir(realtok.Dir(t, c.name))
			if err != nil {
				t.Fatal(err)
			}
			eos, _ := tok.TokenID(c.eos)
			gen := &scripted{}
			for k, r := range replies {
				var ids []int32
				for _, ch := range r {
					ids = append(ids, tok.Encode(string(ch))...)
				}
				ids = append(ids, eos)
				o := TurnOutput{Tokens: ids, Finish: "stop"}
				for range ids {
					o.Logprobs = append(o.Logprobs, -0.25)
					o.Versions = append(o.Versions, int64(k))
				}
				gen.outs = append(gen.outs, o)
			}
			opts := chattemplate.ConversationOptions{System: "Be brief."}
			if err := tok.CheckChat(opts); err != nil {
				t.Fatal(err)
			}
			cfg := testCfg()
			cfg.MaxSeqLen = 4096
			cfg.Vocab = chatVocab{tok}
			cfg.Chat = chatFormat{tok, opts}
			task := talkTask{}
			ep, err := RunEpisode(context.Background(), gen, task, task.Sample(nil), "talk/0", cfg)
			if err != nil {
				t.Fatal(err)
			}
			if ep.Turns != 5 || len(gen.calls) != 5 {
				t.Fatalf("%d turns, %d calls", ep.Turns, len(gen.calls))
			}
			// The conversation as the template sees it.
			msgs := []chattemplate.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hello, who are you?"}}
			for k, call := range gen.calls {
				raw, _ := chattemplate.MarshalMessages(msgs...)
				want, err := tok.Render("", chattemplate.Input{Messages: raw, AddGenerationPrompt: true})
				if err != nil {
					t.Fatal(err)
				}
				if got := tok.Decode(call.Tokens); got != want {
					t.Fatalf("call %d prompt\n %q\nwant\n %q", k, got, want)
				}
				if k > 0 {
					prev := gen.calls[k-1].Tokens
					if !slices.Equal(call.Tokens[:len(prev)+len(gen.outs[k-1].Tokens)], append(slices.Clone(prev), gen.outs[k-1].Tokens...)) {
						t.Fatalf("call %d does not extend call %d and its output token for token", k, k-1)
					}
				}
				msgs = append(msgs, chattemplate.Message{Role: "assistant", Content: replies[k]},
					chattemplate.Message{Role: "user", Content: fmt.Sprintf("Turn %d: you said %q.", k+1, replies[k])})
			}
			if c.name == realtok.Llama31 { // its template renders the last reply as generated
				raw, _ := chattemplate.MarshalMessages(msgs[:len(msgs)-1]...)
				want, err := tok.Render("", chattemplate.Input{Messages: raw})
				if err != nil {
					t.Fatal(err)
				}
				if got := tok.Decode(ep.Tokens); got != want {
					t.Fatalf("trajectory\n %q\nwant the full render\n %q", got, want)
				}
			}
			// Loss mask 1 exactly on the generated tokens, in order.
			var trained []int32
			for i, m := range ep.LossMask {
				if m == 1 {
					trained = append(trained, ep.Tokens[i])
				}
			}
			var generated []int32
			for _, o := range gen.outs {
				generated = append(generated, o.Tokens...)
			}
			if !slices.Equal(trained, generated) || ep.Generated != len(generated) {
				t.Fatalf("trained tokens %v\nwant the generated %v", trained, generated)
			}
			if !strings.HasSuffix(tok.Decode(ep.Tokens), "Bye!"+c.eos) {
				t.Fatalf("trajectory ends %q", tok.Decode(ep.Tokens[len(ep.Tokens)-5:]))
			}
		})
	}
}

// A chat format that cannot start a conversation aborts the episode with
// the reason, before any call.
func TestChatEpisodeRefused(t *testing.T) {
	tok, err := chattemplate.LoadDir(realtok.Dir(t, realtok.Qwen3))
	if err != nil {
		t.Fatal(err)
	}
	gen := &scripted{}
	cfg := testCfg()
	cfg.Vocab = chatVocab{tok}
	cfg.Chat = chatFormat{tok, chattemplate.ConversationOptions{Template: "missing"}}
	task := talkTask{}
	if _, err := RunEpisode(context.Background(), gen, task, task.Sample(nil), "talk/0", cfg); err == nil || !strings.Contains(err.Error(), "missing") || len(gen.calls) != 0 {
		t.Fatalf("err %v, %d calls", err, len(gen.calls))
	}
}

// TestChatEpisodeOverHTTP: the whole token-in/token-out loop over real HTTP
// against the built-in engine serving a Qwen3-vocabulary model with the
// Qwen3 tokenizer: every turn the engine stops on the tokenizer's EOS
// (<|im_end|>), the rollout appends "\n<|im_start|>user\n…" after it as
// context, and the trajectory decodes to the template's rendering of the
// conversation, the model's tokens exactly as sampled.
func TestChatEpisodeOverHTTP(t *testing.T) {
	tok, err := chattemplate.LoadDir(realtok.Dir(t, realtok.Qwen3))
	if err != nil {
		t.Fatal(err)
	}
	eos, _ := tok.TokenID("<|im_end|>")
	model := &engine.HashModel{Seed: 3, Vocab: tok.VocabSize(), MaxLen: 4096, Context: 4, Spread: 4, EOSID: eos, EOSBias: 9}
	ecfg := engine.DefaultConfig()
	ecfg.TimeScale = 0
	e, err := engine.New(ecfg, model, engine.WithTokenizer(tok))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	defer func() { srv.Close(); e.Close(); defaultClient.CloseIdleConnections() }()
	cfg := testCfg()
	cfg.MaxSeqLen = 2048
	cfg.MaxTokens = 24
	cfg.Vocab = chatVocab{tok}
	cfg.Chat = chatFormat{tok, chattemplate.ConversationOptions{}}
	task := talkTask{}
	ep, err := RunEpisode(context.Background(), &HTTPClient{BaseURL: srv.URL, Model: "asyncrl-policy"}, task, task.Sample(nil), "talk/http", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if ep.Turns != 5 {
		t.Fatalf("%d turns", ep.Turns)
	}
	// Split the trajectory into the generated runs (mask 1).
	var runs [][]int32
	for i := 0; i < len(ep.Tokens); {
		if ep.LossMask[i] == 0 {
			i++
			continue
		}
		j := i
		for j < len(ep.Tokens) && ep.LossMask[j] == 1 {
			j++
		}
		runs = append(runs, ep.Tokens[i:j])
		if j < len(ep.Tokens) {
			// The context after a turn: ChatML's "\n" after the model's EOS,
			// or the EOS itself when the turn was cut by max_tokens.
			want := []int32{198, 151644, 872, 198}
			if ep.Tokens[j-1] != eos {
				want = []int32{eos, 198, 151644}
			}
			if !slices.Equal(ep.Tokens[j:j+len(want)-1], want[:len(want)-1]) {
				t.Fatalf("context after turn %d starts %v (%q)", len(runs), ep.Tokens[j:j+4], tok.Decode(ep.Tokens[j:j+4]))
			}
		}
		i = j
	}
	if len(runs) != 5 {
		t.Fatalf("%d generated runs", len(runs))
	}
	msgs := []chattemplate.Message{{Role: "user", Content: "Hello, who are you?"}}
	for k, r := range runs[:4] {
		reply := r
		if reply[len(reply)-1] == eos {
			reply = reply[:len(reply)-1]
		}
		msgs = append(msgs, chattemplate.Message{Role: "assistant", Content: tok.Decode(reply)},
			chattemplate.Message{Role: "user", Content: fmt.Sprintf("Turn %d: you said %q.", k+1, tok.DecodeSkipSpecial(r))})
	}
	raw, _ := chattemplate.MarshalMessages(msgs...)
	want, err := tok.Render("", chattemplate.Input{Messages: raw, AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Decode(ep.Tokens[:len(ep.Tokens)-len(runs[4])]); got != want {
		t.Fatalf("trajectory before the last turn\n %q\nwant\n %q", got, want)
	}
}
