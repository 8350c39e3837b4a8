package engine_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/messages/vllmwire"
	"github.com/asyncrl/asyncrl/model"
)

// vLLM's chat endpoint answers routed_experts per choice in the same form
// as completions: ChatCompletionResponseChoice.routed_experts, base64 of a
// .npy [num_tokens − 1, layers, top_k], set from output.routed_experts by
// numpy2base64 in the non-streamed chat_completion_full_generator, and
// ChatCompletionRequest has routed_experts_prompt_start
// (vllm-project/vllm vllm/entrypoints/openai/chat_completion/protocol.py
// and chat_completion/serving.py). The streamed chat choice has no such
// field.

func postChat(t *testing.T, srv *httptest.Server, body map[string]any) (int, []byte) {
	t.Helper()
	return postTo(t, srv, "/v1/chat/completions", body)
}

func moePolicy(t *testing.T) (*model.Model, model.Config) {
	t.Helper()
	cfg := model.DefaultConfig()
	cfg.Hidden, cfg.Layers, cfg.Experts, cfg.TopK = 24, 2, 4, 2
	m, err := model.New(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	return m, cfg
}

// TestChatRoutedExperts: a chat completion on a mixture-of-experts policy
// with return_routed_experts carries, per choice, the model's own routes of
// positions [routed_experts_prompt_start, prompt + generated − 1) of the
// rendered prompt, in vLLM's wire form; without the flag it carries none.
func TestChatRoutedExperts(t *testing.T) {
	m, cfg := moePolicy(t)
	srv := serve(t, m)
	msgs := []map[string]any{{"role": "user", "content": "rev ab="}}
	for _, start := range []int{0, 5} {
		code, body := postChat(t, srv, map[string]any{"messages": msgs, "max_tokens": 5, "ignore_eos": true, "n": 2,
			"return_token_ids": true, "return_routed_experts": true, "routed_experts_prompt_start": start,
			"temperature": 1, "seed": 9})
		if code != http.StatusOK {
			t.Fatalf("start %d: %d %s", start, code, body)
		}
		var r engine.ChatResponse
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatal(err)
		}
		if len(r.Choices) != 2 {
			t.Fatalf("%d choices, want 2", len(r.Choices))
		}
		for _, ch := range r.Choices {
			if ch.RoutedExperts == nil {
				t.Fatalf("start %d choice %d: no routed_experts in %s", start, ch.Index, body)
			}
			rows, err := vllmwire.DecodeRoutedExperts(*ch.RoutedExperts, int32(cfg.Experts), cfg.Layers, cfg.TopK)
			if err != nil {
				t.Fatal(err)
			}
			all := append(slices.Clone(ch.PromptTokenIDs), ch.TokenIDs...)
			if len(ch.PromptTokenIDs) <= start || len(ch.TokenIDs) != 5 {
				t.Fatalf("prompt %v, generated %v", ch.PromptTokenIDs, ch.TokenIDs)
			}
			if want := len(all) - 1 - start; rows.Tokens != want {
				t.Fatalf("start %d: %d rows, want %d", start, rows.Tokens, want)
			}
			if own := m.Routes(all[:len(all)-1], start); !slices.Equal(rows.Values, own) {
				t.Fatalf("start %d choice %d: engine routes %v, the model's %v", start, ch.Index, rows.Values, own)
			}
		}
	}
	code, body := postChat(t, srv, map[string]any{"messages": msgs, "max_tokens": 2})
	if code != http.StatusOK || bytes.Contains(body, []byte("routed_experts")) {
		t.Fatalf("without return_routed_experts: %d %s", code, body)
	}
}

// TestChatRoutedExpertsRefusals: the bad uses completions refuses are
// refused on chat too, each a 400 naming the field: a start at or past the
// rendered prompt's length, a streamed request, a negative start, and a
// dense model.
func TestChatRoutedExpertsRefusals(t *testing.T) {
	m, _ := moePolicy(t)
	srv := serve(t, m)
	msgs := []map[string]any{{"role": "user", "content": "ab"}}
	// rendered: BOS + "<|user|>ab<|assistant|>" = 24 tokens
	for _, c := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"messages": msgs, "return_routed_experts": true, "routed_experts_prompt_start": 24}, "routed_experts_prompt_start"},
		{map[string]any{"messages": msgs, "return_routed_experts": true, "stream": true}, "return_routed_experts"},
		{map[string]any{"messages": msgs, "routed_experts_prompt_start": -1}, "routed_experts_prompt_start"},
	} {
		code, body := postChat(t, srv, c.body)
		if code != http.StatusBadRequest || !bytes.Contains(body, []byte(`"param":"`+c.field+`"`)) {
			t.Errorf("%v: %d %s, want 400 naming %s", c.body, code, body, c.field)
		}
	}
	code, body := postChat(t, srv, map[string]any{"messages": msgs, "return_routed_experts": true, "routed_experts_prompt_start": 23, "max_tokens": 1})
	if code != http.StatusOK || !bytes.Contains(body, []byte("routed_experts")) {
		t.Fatalf("start 23 of 24: %d %s", code, body)
	}

	cfg := model.DefaultConfig()
	cfg.Hidden = 16
	dense, err := model.New(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	code, body = postChat(t, serve(t, dense), map[string]any{"messages": msgs, "return_routed_experts": true})
	if code != http.StatusBadRequest || !bytes.Contains(body, []byte("return_routed_experts")) {
		t.Fatalf("dense model with return_routed_experts: %d %s", code, body)
	}
}
