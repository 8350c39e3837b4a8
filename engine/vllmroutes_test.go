package engine

import (
	"encoding/json"
	"strings"
	"testing"
)

// POST /pause with no query behaves as vLLM's: mode abort (in-flight
// requests end with their partial output), and the answer is
// {"status":"paused"}.
func TestPauseHTTPDefaultsAreVLLMs(t *testing.T) {
	h := newHarness(t, slowConfig())
	body, hdr := longReq("d-1")
	ch := h.postAsync("/v1/completions", body, hdr...)
	eventually(t, "first tokens", func() bool { return h.generated("d-1") > 0 })
	code, _, out := h.post("/pause", nil)
	if code != 200 || strings.TrimSpace(string(out)) != `{"status":"paused"}` {
		t.Fatalf("pause: %d %s", code, out)
	}
	if c := decodeCompletion(t, recv(t, ch)); *c.FinishReason != "abort" {
		t.Fatalf("default pause mode left the request running: finish %s", *c.FinishReason)
	}
	if code, _, out := h.post("/resume", nil); code != 200 || strings.TrimSpace(string(out)) != `{"status":"resumed"}` {
		t.Fatalf("resume: %d %s", code, out)
	}
}

func TestSleepLevels(t *testing.T) {
	h := newHarness(t, testConfig())
	if code, _, _ := h.post("/sleep?level=3", nil); code != 400 {
		t.Fatalf("level 3: %d", code)
	}
	if code, _, out := h.post("/sleep?level=2", nil); code != 200 || len(out) != 0 {
		t.Fatalf("level 2: %d %q (vLLM answers an empty 200)", code, out)
	}
	if !h.e.IsSleeping() {
		t.Fatal("not sleeping")
	}
	if code, _, out := h.post("/wake_up", nil); code != 200 || len(out) != 0 || h.e.IsSleeping() {
		t.Fatalf("wake_up: %d %q", code, out)
	}
}

func TestCollectiveRPCErrors(t *testing.T) {
	h := newHarness(t, testConfig(), WithLoader(func(dir string) (Model, error) { return NewHashModel(9), nil }))
	if code, _, _ := h.post("/collective_rpc", map[string]any{"args": []string{}}); code != 400 {
		t.Fatalf("no method: %d", code)
	}
	code, _, out := h.post("/collective_rpc", map[string]any{"method": "asyncrl_nope"})
	var eb ErrorBody
	if code != 500 || json.Unmarshal(out, &eb) != nil || !strings.Contains(eb.Error.Message, "has no attribute 'asyncrl_nope'") {
		t.Fatalf("unknown method: %d %s", code, out)
	}
	if code, _, out := h.post("/collective_rpc", map[string]any{"method": RPCLoadCheckpoint, "args": []any{"/ckpt"}}); code != 400 {
		t.Fatalf("missing version: %d %s", code, out)
	}
	// Version as a number, a numeric string, or kwargs: all load.
	for i, req := range []map[string]any{
		{"method": RPCLoadCheckpoint, "args": []any{"/ckpt", 3}},
		{"method": RPCLoadCheckpoint, "args": []any{"/ckpt", "4"}},
		{"method": RPCLoadCheckpoint, "kwargs": map[string]any{"dir": "/ckpt", "version": "5"}},
	} {
		code, _, out := h.post("/collective_rpc", req)
		if code != 200 || !strings.Contains(string(out), `{"results":[{"version":`+string(rune('3'+i))+`}]}`) {
			t.Fatalf("load %d: %d %s", i, code, out)
		}
	}
	if code, _, out := h.post("/collective_rpc", map[string]any{"method": RPCLoadCheckpoint, "args": []any{"/ckpt", "2"}}); code != 409 {
		t.Fatalf("version decrease: %d %s", code, out)
	}
	if code, _, out := h.post("/collective_rpc", map[string]any{"method": RPCLoadedVersion}); code != 200 || strings.TrimSpace(string(out)) != `{"results":["5"]}` {
		t.Fatalf("loaded version: %d %s", code, out)
	}
	if h.e.CheckpointDir() != "/ckpt" {
		t.Fatalf("checkpoint dir %q", h.e.CheckpointDir())
	}
}

// return_tokens_as_token_ids names logprob tokens (and top_logprobs keys)
// "token_id:N"; logprobs: 0 lists only the sampled token.
func TestReturnTokensAsTokenIDs(t *testing.T) {
	h := newHarness(t, testConfig())
	r := h.complete(map[string]any{"prompt": []int{1, 40, 41}, "max_tokens": 3, "logprobs": 0,
		"return_token_ids": true, "return_tokens_as_token_ids": true})
	c := r.Choices[0]
	if len(c.TokenIDs) != 3 || len(c.Logprobs.Tokens) != 3 {
		t.Fatalf("%+v", c)
	}
	for i, id := range c.TokenIDs {
		want := "token_id:" + itoa(int(id))
		if c.Logprobs.Tokens[i] != want || len(c.Logprobs.TopLogprobs[i]) != 1 || c.Logprobs.TopLogprobs[i][want] != c.Logprobs.TokenLogprobs[i] {
			t.Fatalf("token %d: %q, top %v, want %q", i, c.Logprobs.Tokens[i], c.Logprobs.TopLogprobs[i], want)
		}
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
