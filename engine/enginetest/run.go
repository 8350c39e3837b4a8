package enginetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/engine/driver"
)

// Option configures Run.
type Option func(*config)

type config struct {
	model       string
	prompt      []int32
	ckptDir     string
	ckptVersion int64
	deltaDir    string
	deltaVer    int64
	loraName    string
	loraPath    string
	noSleep     bool
	client      *http.Client
}

// WithModel names the served model (default: the first /v1/models lists).
func WithModel(name string) Option { return func(c *config) { c.model = name } }

// WithPrompt sets the prompt token ids (default: the fixture's).
func WithPrompt(ids []int32) Option { return func(c *config) { c.prompt = ids } }

// WithCheckpoint makes Run load a full checkpoint dir as version.
func WithCheckpoint(dir string, version int64) Option {
	return func(c *config) { c.ckptDir, c.ckptVersion = dir, version }
}

// WithDelta makes Run apply the delta version in dir after the checkpoint
// (vLLM and built-in only).
func WithDelta(dir string, version int64) Option {
	return func(c *config) { c.deltaDir, c.deltaVer = dir, version }
}

// WithLoRA makes Run load, use and unload an adapter.
func WithLoRA(name, path string) Option {
	return func(c *config) { c.loraName, c.loraPath = name, path }
}

// WithoutSleep skips sleep/wake (an engine started without sleep mode).
func WithoutSleep() Option { return func(c *config) { c.noSleep = true } }

// WithClient sets the HTTP client.
func WithClient(cl *http.Client) Option { return func(c *config) { c.client = cl } }

// Run checks that the engine of kind at baseURL answers every route the
// driver uses with the fixtures' shapes, and that the driver works against
// it. It changes the engine's state (pause/resume, loads, sleep/wake) and
// leaves it resumed and awake.
func Run(t *testing.T, baseURL string, kind driver.Kind, opts ...Option) {
	t.Helper()
	c := config{client: &http.Client{Timeout: 2 * time.Minute}}
	for _, o := range opts {
		o(&c)
	}
	fx, err := Fixtures(kind)
	if err != nil {
		t.Fatal(err)
	}
	drv, err := driver.New(kind, baseURL, driver.Options{Client: c.client, Model: c.model})
	if err != nil {
		t.Fatal(err)
	}
	r := &runner{t: t, url: baseURL, fx: fx, c: c, drv: drv, ctx: context.Background()}
	r.common()
	if kind == driver.KindSGLang {
		r.sglang()
	} else {
		r.vllm()
	}
}

type runner struct {
	t   *testing.T
	url string
	fx  map[string]*Fixture
	c   config
	drv driver.Driver
	ctx context.Context
}

// exchange sends one request and returns status and body.
func (r *runner) exchange(method, path string, query map[string]string, body any) (int, []byte, error) {
	u := r.url + path
	if len(query) > 0 {
		q := url.Values{}
		for k, v := range query {
			q.Set(k, v)
		}
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		var b []byte
		switch v := body.(type) {
		case json.RawMessage:
			b = v
		default:
			var err error
			if b, err = json.Marshal(v); err != nil {
				return 0, nil, err
			}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(r.ctx, method, u, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := r.c.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// route checks one fixture's route: status as documented and, for JSON
// answers, the documented shape. body nil sends the fixture's request.
func (r *runner) route(t *testing.T, name string, query map[string]string, body any) []byte {
	t.Helper()
	f, ok := r.fx[name]
	if !ok {
		t.Fatalf("no fixture %q", name)
	}
	if query == nil {
		query = f.Query
	}
	if body == nil && len(f.Request) > 0 && string(f.Request) != "null" {
		body = f.Request
	}
	status, data, err := r.exchange(f.Method, f.Path, query, body)
	if err != nil {
		t.Fatalf("%s %s: %v", f.Method, f.Path, err)
	}
	if status != f.Status {
		t.Fatalf("%s %s: HTTP %d, want %d (fixture %s/%s from %s %s): %.300s", f.Method, f.Path, status, f.Status, f.Engine, f.Name, f.Source.Repo, f.Source.Path, data)
	}
	if f.IsJSON() {
		if errs := CheckShape(f.Response, data); len(errs) > 0 {
			t.Fatalf("%s %s: answer differs from %s %s: %v\nanswer: %.500s", f.Method, f.Path, f.Source.Repo, f.Source.Path, errs, data)
		}
	}
	return data
}

func (r *runner) common() {
	t := r.t
	t.Run("health", func(t *testing.T) {
		r.route(t, "health", nil, nil)
		if err := r.drv.Health(r.ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("models", func(t *testing.T) {
		r.route(t, "models", nil, nil)
		names, err := r.drv.Models(r.ctx)
		if err != nil || len(names) == 0 {
			t.Fatalf("models %v, %v", names, err)
		}
		if r.c.model == "" {
			r.c.model = names[0]
		} else if !slices.Contains(names, r.c.model) {
			t.Fatalf("served models %v lack %q", names, r.c.model)
		}
	})
	if r.c.prompt == nil {
		r.c.prompt = r.fixturePrompt()
	}
}

// fixturePrompt is the prompt of the generation fixture.
func (r *runner) fixturePrompt() []int32 {
	var req struct {
		Prompt   []int32 `json:"prompt"`
		InputIDs []int32 `json:"input_ids"`
	}
	for _, n := range []string{"completions", "generate"} {
		if f, ok := r.fx[n]; ok {
			_ = json.Unmarshal(f.Request, &req)
		}
	}
	if req.Prompt != nil {
		return req.Prompt
	}
	return req.InputIDs
}

// checkGenerated checks a driver result's token-in/token-out invariants.
// checkMetrics asserts the driver reads every one of names from /metrics.
func (r *runner) checkMetrics(t *testing.T, names ...string) {
	t.Helper()
	m, err := r.drv.Metrics(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if _, ok := m.Raw[name]; !ok {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}

func checkGenerated(t *testing.T, res driver.GenerateResult, prompt []int32, maxTokens int) {
	t.Helper()
	if !slices.Equal(res.PromptIDs, prompt) {
		t.Fatalf("prompt ids %v, sent %v", res.PromptIDs, prompt)
	}
	if len(res.TokenIDs) < 1 || len(res.TokenIDs) > maxTokens {
		t.Fatalf("%d tokens for max_tokens %d", len(res.TokenIDs), maxTokens)
	}
	if len(res.Logprobs) != len(res.TokenIDs) {
		t.Fatalf("%d logprobs for %d tokens", len(res.Logprobs), len(res.TokenIDs))
	}
	for i, lp := range res.Logprobs {
		if lp > 0 {
			t.Fatalf("logprob[%d] = %v > 0", i, lp)
		}
	}
	if res.FinishReason == "" {
		t.Fatal("no finish reason")
	}
}

func (r *runner) vllm() {
	t := r.t
	t.Run("completions", r.vllmCompletions)
	t.Run("metrics", func(t *testing.T) {
		r.checkMetrics(t, "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
			"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total")
	})
	t.Run("pause", r.vllmPause)
	t.Run("reset_prefix_cache", func(t *testing.T) {
		r.route(t, "reset_prefix_cache", nil, nil)
	})
	t.Run("collective_rpc", r.vllmCollectiveRPC)
	r.weights()
	if !r.c.noSleep {
		t.Run("sleep", func(t *testing.T) {
			r.route(t, "sleep", nil, nil)
			r.route(t, "wake_up", nil, nil)
			if err := r.drv.Sleep(r.ctx, 2); err != nil {
				t.Fatal(err)
			}
			if err := r.drv.WakeUp(r.ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
	r.lora("load_lora_adapter", "unload_lora_adapter", map[string]any{"load_inplace": true})
}

// vllmCompletions checks /v1/completions' token ids and logprobs, then a driver Generate.
func (r *runner) vllmCompletions(t *testing.T) {
	const maxTokens = 2
	body := map[string]any{}
	_ = json.Unmarshal(r.fx["completions"].Request, &body)
	body["model"], body["prompt"], body["max_tokens"] = r.c.model, r.c.prompt, maxTokens
	data := r.route(t, "completions", nil, body)
	var resp struct {
		Choices []struct {
			TokenIDs       []int32 `json:"token_ids"`
			PromptTokenIDs []int32 `json:"prompt_token_ids"`
			Logprobs       struct {
				Tokens        []string  `json:"tokens"`
				TokenLogprobs []float32 `json:"token_logprobs"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(data, &resp); err != nil || len(resp.Choices) != 1 {
		t.Fatalf("completions: %v, %d choices", err, len(resp.Choices))
	}
	ch := resp.Choices[0]
	if !slices.Equal(ch.PromptTokenIDs, r.c.prompt) {
		t.Fatalf("prompt_token_ids %v, sent %v", ch.PromptTokenIDs, r.c.prompt)
	}
	if len(ch.Logprobs.TokenLogprobs) != len(ch.TokenIDs) || len(ch.Logprobs.Tokens) != len(ch.TokenIDs) {
		t.Fatalf("logprobs: %d token_logprobs, %d tokens for %d token_ids (logprobs: 0 asks for one each)",
			len(ch.Logprobs.TokenLogprobs), len(ch.Logprobs.Tokens), len(ch.TokenIDs))
	}
	for i, id := range ch.TokenIDs {
		if want := "token_id:" + strconv.Itoa(int(id)); ch.Logprobs.Tokens[i] != want {
			t.Fatalf("logprobs.tokens[%d] = %q, want %q (return_tokens_as_token_ids)", i, ch.Logprobs.Tokens[i], want)
		}
	}
	res, err := r.drv.Generate(r.ctx, driver.GenerateRequest{PromptIDs: r.c.prompt, MaxTokens: maxTokens, Temperature: 1})
	if err != nil {
		t.Fatal(err)
	}
	checkGenerated(t, res, r.c.prompt, maxTokens)
}

// vllmPause pauses and resumes by route and by the driver.
func (r *runner) vllmPause(t *testing.T) {
	r.route(t, "pause", nil, nil)
	if p, err := r.drv.IsPaused(r.ctx); err != nil || !p {
		t.Fatalf("is_paused after pause = %v, %v", p, err)
	}
	r.route(t, "resume", nil, nil)
	r.route(t, "is_paused", nil, nil)
	if p, err := r.drv.IsPaused(r.ctx); err != nil || p {
		t.Fatalf("is_paused after resume = %v, %v", p, err)
	}
	if err := r.drv.Pause(r.ctx, driver.PauseAbort, true); err != nil {
		t.Fatal(err)
	}
	if err := r.drv.Resume(r.ctx); err != nil {
		t.Fatal(err)
	}
}

// vllmCollectiveRPC calls collective_rpc, and an unknown method whose error names it.
func (r *runner) vllmCollectiveRPC(t *testing.T) {
	data := r.route(t, "collective_rpc", nil, nil)
	var out struct {
		Results []json.RawMessage `json:"results"`
	}
	if err := json.Unmarshal(data, &out); err != nil || len(out.Results) == 0 {
		t.Fatalf("collective_rpc answer %s: %v", data, err)
	}
	if _, err := r.drv.ServedVersion(r.ctx); err != nil {
		t.Fatal(err)
	}
	bad := map[string]any{"method": "asyncrl_no_such_method", "args": []string{}, "kwargs": map[string]string{}}
	data = r.route(t, "collective_rpc_missing_method", nil, bad)
	if !bytes.Contains(data, []byte("asyncrl_no_such_method")) {
		t.Fatalf("an unknown method's error does not name it: %s", data)
	}
}

func (r *runner) weights() {
	t := r.t
	if r.c.ckptDir != "" {
		t.Run("load_checkpoint", func(t *testing.T) {
			if err := r.drv.LoadCheckpoint(r.ctx, r.c.ckptDir, r.c.ckptVersion); err != nil {
				t.Fatal(err)
			}
			if v, err := r.drv.ServedVersion(r.ctx); err != nil || v != r.c.ckptVersion {
				t.Fatalf("served version %d, %v after loading %d", v, err, r.c.ckptVersion)
			}
			res, err := r.drv.Generate(r.ctx, driver.GenerateRequest{PromptIDs: r.c.prompt, MaxTokens: 1})
			if err != nil {
				t.Fatal(err)
			}
			if res.TokenVersions != nil && res.TokenVersions[0] != r.c.ckptVersion {
				t.Fatalf("token version %d after loading %d", res.TokenVersions[0], r.c.ckptVersion)
			}
		})
	}
	if r.c.deltaDir != "" {
		t.Run("apply_delta", func(t *testing.T) {
			err := r.drv.ApplyDelta(r.ctx, r.c.deltaDir, r.c.deltaVer)
			if r.drv.Kind() == driver.KindSGLang {
				if !errors.Is(err, driver.ErrUnsupported) {
					t.Fatalf("SGLang ApplyDelta: %v, want ErrUnsupported", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if v, err := r.drv.ServedVersion(r.ctx); err != nil || v != r.c.deltaVer {
				t.Fatalf("served version %d, %v after delta %d", v, err, r.c.deltaVer)
			}
		})
	}
}

func (r *runner) lora(load, unload string, extra map[string]any) {
	if r.c.loraName == "" {
		return
	}
	r.t.Run("lora", func(t *testing.T) {
		body := map[string]any{"lora_name": r.c.loraName, "lora_path": r.c.loraPath}
		for k, v := range extra {
			body[k] = v
		}
		r.route(t, load, nil, body)
		names, err := r.drv.Models(r.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.drv.Kind() != driver.KindSGLang && !slices.Contains(names, r.c.loraName) {
			t.Fatalf("/v1/models %v lacks the adapter %q", names, r.c.loraName)
		}
		if err := r.drv.LoadLoRA(r.ctx, r.c.loraName, r.c.loraPath); err != nil { // in place
			t.Fatal(err)
		}
		res, err := r.drv.Generate(r.ctx, driver.GenerateRequest{Model: r.c.loraName, PromptIDs: r.c.prompt, MaxTokens: 1})
		if err != nil {
			t.Fatal(err)
		}
		checkGenerated(t, res, r.c.prompt, 1)
		r.route(t, unload, nil, map[string]any{"lora_name": r.c.loraName})
	})
}

func (r *runner) sglang() {
	t := r.t
	const maxTokens = 2
	t.Run("generate", func(t *testing.T) {
		body := map[string]any{}
		_ = json.Unmarshal(r.fx["generate"].Request, &body)
		body["input_ids"] = r.c.prompt
		body["sampling_params"] = map[string]any{"max_new_tokens": maxTokens, "temperature": 1.0}
		r.route(t, "generate", nil, body)
		res, err := r.drv.Generate(r.ctx, driver.GenerateRequest{PromptIDs: r.c.prompt, MaxTokens: maxTokens, Temperature: 1})
		if err != nil {
			t.Fatal(err)
		}
		checkGenerated(t, res, r.c.prompt, maxTokens)
	})
	t.Run("metrics", func(t *testing.T) {
		r.checkMetrics(t, "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", "sglang:cache_hit_rate")
	})
	t.Run("pause", func(t *testing.T) {
		r.route(t, "pause_generation", nil, nil)
		r.route(t, "continue_generation", nil, nil)
		if err := r.drv.Pause(r.ctx, driver.PauseAbort, true); err != nil {
			t.Fatal(err)
		}
		if err := r.drv.Resume(r.ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("flush_cache", func(t *testing.T) { r.route(t, "flush_cache", nil, nil) })
	if r.c.ckptDir != "" {
		t.Run("update_weights_from_disk", func(t *testing.T) {
			body := map[string]any{"model_path": r.c.ckptDir, "weight_version": fmt.Sprint(r.c.ckptVersion), "flush_cache": true}
			r.route(t, "update_weights_from_disk", nil, body)
		})
	}
	r.weights()
	if !r.c.noSleep {
		t.Run("memory_occupation", func(t *testing.T) {
			r.route(t, "release_memory_occupation", nil, nil)
			r.route(t, "resume_memory_occupation", nil, nil)
		})
	}
	r.lora("load_lora_adapter", "unload_lora_adapter", nil)
}
