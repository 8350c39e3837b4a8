package server_test

import (
	"testing"
)

// SamplingParams() without max_tokens: the SDK drops the None
// (types/_pydantic_types/sampling_params.py, tinker 6b025363 and
// d595dc2b); the server samples up to the rest of the context (256 for
// the built-in policy) instead of answering 422.
func TestSampleWithoutMaxTokens(t *testing.T) {
	r, _ := start(t, testConfig(t.TempDir()), "")
	c := rawClient{t: t, url: r.URL}
	prompt := []any{1, 82, 72}
	code, out := c.do("POST", "asample", `{"base_model":"asyncrl-policy","num_samples":4,"prompt":{"chunks":[{"tokens":[1,82,72],"type":"encoded_text"}]},"sampling_params":{"temperature":1.0,"top_k":-1,"top_p":1.0},"topk_prompt_logprobs":0,"type":"sample"}`)
	want(t, "asample without max_tokens", code, 200, out, "request_id")
	res := c.wait(out["request_id"].(string))
	seqs, ok := res["sequences"].([]any)
	if !ok || len(seqs) != 4 {
		t.Fatalf("result %v", res)
	}
	room := 256 - len(prompt)
	for _, s := range seqs {
		m := s.(map[string]any)
		n := len(m["tokens"].([]any))
		switch m["stop_reason"] {
		case "length":
			if n != room {
				t.Fatalf("stopped for length after %d tokens, want the rest of the context, %d", n, room)
			}
		case "stop":
			if n > room {
				t.Fatalf("%d tokens past the context's %d", n, room)
			}
		default:
			t.Fatalf("sequence %v", m)
		}
	}
}
