package rollout

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/actors/router/proxy"
	"github.com/asyncrl/asyncrl/engine"
)

// vllmFixture is a vLLM /v1/completions answer; testdata/README.md cites
// the vLLM source its shape comes from.
func vllmFixture(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/vllm_completion_logprobs0.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The fixture's prompt, tokens and sampled-token logprobs.
var (
	fixturePrompt   = []int32{151644, 872, 198, 3838, 374}
	fixtureTokens   = []int32{220, 19, 271, 785}
	fixtureLogprobs = []float32{-0.0123, -1.5, -0.25, -3.75}
)

// fakeVLLM answers every /v1/completions call with body and the given
// headers, and keeps the last request body.
type fakeVLLM struct {
	srv     *httptest.Server
	body    []byte
	headers map[string]string
	last    map[string]json.RawMessage
}

func newFakeVLLM(t *testing.T, body []byte, headers map[string]string) *fakeVLLM {
	t.Helper()
	f := &fakeVLLM{body: body, headers: headers}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/completions" {
			return // /health and the like
		}
		f.last = nil
		if err := json.NewDecoder(r.Body).Decode(&f.last); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for k, v := range f.headers {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(f.body)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeVLLM) field(t *testing.T, name string) string {
	t.Helper()
	v, ok := f.last[name]
	if !ok {
		t.Fatalf("request has no %q field: %v", name, f.last)
	}
	return string(v)
}

var routerHeaders = map[string]string{versionMinHeader: "9", versionMaxHeader: "10"}

func fixtureTurn() TurnRequest {
	return TurnRequest{SessionID: "s", Tokens: fixturePrompt, MaxTokens: 4, Temperature: 1, TopP: 1, TopK: -1}
}

func TestHTTPClientAgainstVLLMAnswer(t *testing.T) {
	f := newFakeVLLM(t, vllmFixture(t), routerHeaders)
	c := &HTTPClient{BaseURL: f.srv.URL, Model: "Qwen/Qwen3-8B", StopTokenIDs: []int32{151645}, Stop: []string{"Observation:"}}
	out, err := c.Generate(context.Background(), fixtureTurn())
	if err != nil {
		t.Fatal(err)
	}
	// The request is vLLM's token-in/token-out form.
	for name, want := range map[string]string{
		"model": `"Qwen/Qwen3-8B"`, "prompt": `[151644,872,198,3838,374]`, "max_tokens": "4",
		"logprobs": "0", "return_token_ids": "true", "return_tokens_as_token_ids": "true",
		"stop_token_ids": "[151645]", "stop": `["Observation:"]`,
	} {
		if got := f.field(t, name); got != want {
			t.Errorf("request %s = %s, want %s", name, got, want)
		}
	}
	if !slices.Equal(out.Tokens, fixtureTokens) || !slices.Equal(out.Logprobs, fixtureLogprobs) || out.Finish != "length" {
		t.Fatalf("out = %+v", out)
	}
	// No token_weight_versions in vLLM's answer: every token gets the
	// router's minimum.
	if !slices.Equal(out.Versions, []int64{9, 9, 9, 9}) {
		t.Fatalf("versions %v, want the router's minimum 9 for each token", out.Versions)
	}
	if out.Support != nil || out.SupportLogprobs != nil {
		t.Fatalf("vLLM sends no support sets, got %v %v", out.Support, out.SupportLogprobs)
	}
	// Without a Model the field is left out (vLLM's default model).
	if _, err := (&HTTPClient{BaseURL: f.srv.URL}).Generate(context.Background(), fixtureTurn()); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.last["model"]; ok {
		t.Fatalf("empty Model sent a model field: %s", f.last["model"])
	}
	defaultClient.CloseIdleConnections()
}

// mutate rewrites the fixture's first choice.
func mutate(t *testing.T, edit func(ch map[string]any)) []byte {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(vllmFixture(t), &doc); err != nil {
		t.Fatal(err)
	}
	edit(doc["choices"].([]any)[0].(map[string]any))
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestHTTPClientRejectsIncompleteAnswers(t *testing.T) {
	logprobs := func(ch map[string]any) map[string]any { return ch["logprobs"].(map[string]any) }
	for _, tc := range []struct {
		name    string
		body    []byte
		headers map[string]string
		want    string
	}{
		{"null logprob of a generated token", mutate(t, func(ch map[string]any) {
			logprobs(ch)["token_logprobs"].([]any)[2] = nil
		}), routerHeaders, "token_logprobs[2] is null"},
		{"no logprobs object", mutate(t, func(ch map[string]any) { ch["logprobs"] = nil }), routerHeaders,
			"no logprobs for 4 tokens"},
		{"short token_logprobs", mutate(t, func(ch map[string]any) {
			logprobs(ch)["token_logprobs"] = []any{-0.1, -0.2, -0.3}
		}), routerHeaders, "4 token_ids but 3 logprobs"},
		{"no versions anywhere", vllmFixture(t), nil, "no weight versions for 4 tokens"},
		{"short token_weight_versions", mutate(t, func(ch map[string]any) {
			ch["token_weight_versions"] = []any{1, 1}
		}), nil, "4 token_ids but 2 token_weight_versions"},
		{"no token_ids", mutate(t, func(ch map[string]any) { delete(ch, "token_ids") }), routerHeaders,
			"no choices[0].token_ids"},
		{"truncated prompt", mutate(t, func(ch map[string]any) {
			ch["prompt_token_ids"] = []any{872, 198, 3838, 374}
		}), routerHeaders, "prompt_token_ids (4 tokens) differ from the 5 prompt tokens sent"},
		{"bad version header", vllmFixture(t), map[string]string{versionMinHeader: "v9"}, versionMinHeader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeVLLM(t, tc.body, tc.headers)
			_, err := (&HTTPClient{BaseURL: f.srv.URL}).Generate(context.Background(), fixtureTurn())
			if !errors.Is(err, ErrEngine) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrEngine mentioning %q", err, tc.want)
			}
		})
	}
	defaultClient.CloseIdleConnections()
}

// The engine's own fields win over vLLM's: output_logprobs over
// token_logprobs, token_weight_versions over the router's header.
func TestHTTPClientPrefersEngineExtensions(t *testing.T) {
	body := mutate(t, func(ch map[string]any) {
		ch["output_logprobs"] = []any{-1, -2, -3, -4}
		ch["token_weight_versions"] = []any{3, 3, 4, 4}
	})
	f := newFakeVLLM(t, body, routerHeaders)
	out, err := (&HTTPClient{BaseURL: f.srv.URL}).Generate(context.Background(), fixtureTurn())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out.Logprobs, []float32{-1, -2, -3, -4}) || !slices.Equal(out.Versions, []int64{3, 3, 4, 4}) {
		t.Fatalf("logprobs %v versions %v", out.Logprobs, out.Versions)
	}
	defaultClient.CloseIdleConnections()
}

// startRouter serves a router in front of replicas.
func startRouter(t *testing.T, replicas ...string) (*proxy.Router, string) {
	t.Helper()
	cfg := proxy.DefaultConfig()
	cfg.HealthInterval, cfg.MetricsInterval = 0, 0
	cfg.Replicas = replicas
	r, err := proxy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r.Handler())
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = r.Shutdown(ctx)
	})
	return r, srv.URL
}

// Through the real router, a vLLM answer's tokens get the version the
// router recorded for the replica.
func TestHTTPClientVersionsFromRouter(t *testing.T) {
	f := newFakeVLLM(t, vllmFixture(t), nil)
	r, url := startRouter(t, f.srv.URL)
	if err := r.Apply(policy.SetVersion{URL: f.srv.URL, Version: 11}); err != nil {
		t.Fatal(err)
	}
	out, err := (&HTTPClient{BaseURL: url}).Generate(context.Background(), fixtureTurn())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out.Versions, []int64{11, 11, 11, 11}) || out.Engine != f.srv.URL {
		t.Fatalf("versions %v engine %q, want 11s from %s", out.Versions, out.Engine, f.srv.URL)
	}
	defaultClient.CloseIdleConnections()
}

// The built-in engine answers the vLLM request: its logprobs.token_logprobs
// (logprobs: 0) agree with its output_logprobs, and prompt_token_ids echo
// the prompt.
func TestBuiltinEngineAnswersVLLMRequest(t *testing.T) {
	e, err := engine.New(func() engine.Config { c := engine.DefaultConfig(); c.TimeScale = 0; return c }(), engine.NewHashModel(1))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	defer func() { srv.Close(); e.Close() }()
	body, _ := json.Marshal(completionBody{Prompt: []int32{1, 40, 41}, MaxTokens: 5, Temperature: 1, TopP: 1, TopK: -1,
		ReturnTokenIDs: true, ReturnTokensAsTokenIDs: true})
	resp, err := http.Post(srv.URL+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var cr engine.CompletionResponse
	if err := json.NewDecoder(resp.Body).Decode(&cr); err != nil || len(cr.Choices) != 1 {
		t.Fatalf("decode: %v, %d choices", err, len(cr.Choices))
	}
	ch := cr.Choices[0]
	if ch.Logprobs == nil || len(ch.Logprobs.TokenLogprobs) != len(ch.TokenIDs) || len(ch.TokenIDs) == 0 {
		t.Fatalf("logprobs %+v for %d tokens", ch.Logprobs, len(ch.TokenIDs))
	}
	if !slices.Equal(ch.Logprobs.TokenLogprobs, ch.OutputLogprobs) {
		t.Fatalf("token_logprobs %v != output_logprobs %v", ch.Logprobs.TokenLogprobs, ch.OutputLogprobs)
	}
	if !slices.Equal(ch.PromptTokenIDs, []int32{1, 40, 41}) {
		t.Fatalf("prompt_token_ids %v", ch.PromptTokenIDs)
	}
	http.DefaultClient.CloseIdleConnections()
}
