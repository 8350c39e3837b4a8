package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// slowConfig makes each step take 2 ms of real time so a test can act
// while a request is in flight.
func slowConfig() Config {
	cfg := testConfig()
	cfg.TimeScale = 1
	cfg.Latency.DecodeBase = 2 * time.Millisecond
	cfg.Latency.DecodePerSeq = 0
	cfg.Latency.PrefillPerToken = 0
	return cfg
}

func longReq(id string) (map[string]any, []string) {
	return map[string]any{"prompt": "long", "max_tokens": 150, "ignore_eos": true, "seed": 1}, []string{"X-Request-Id", id}
}

func decodeCompletion(t *testing.T, r result) CompletionChoice {
	t.Helper()
	if r.code != 200 {
		t.Fatalf("status %d: %s", r.code, r.body)
	}
	var resp CompletionResponse
	if err := json.Unmarshal(r.body, &resp); err != nil {
		t.Fatal(err)
	}
	return resp.Choices[0]
}

func TestPauseKeepSpansVersions(t *testing.T) {
	h := newHarness(t, slowConfig())
	body, hdr := longReq("keep-1")
	ch := h.postAsync("/v1/completions", body, hdr...)
	eventually(t, "first tokens", func() bool { return h.generated("keep-1") > 0 })
	if code, _, out := h.post("/pause?mode=keep", nil); code != 200 {
		t.Fatalf("pause: %d %s", code, out)
	}
	if _, out := h.get("/is_paused"); !strings.Contains(string(out), `"is_paused":true`) {
		t.Fatalf("is_paused = %s", out)
	}
	frozen := h.generated("keep-1")
	if err := h.e.SetModel(NewHashModel(2), 1); err != nil {
		t.Fatal(err)
	}
	// A request arriving during the pause is held, not served.
	ch2 := h.postAsync("/v1/completions", map[string]any{"prompt": "late", "max_tokens": 3}, "X-Request-Id", "keep-2")
	eventually(t, "late request held", func() bool {
		h.e.mu.Lock()
		defer h.e.mu.Unlock()
		return len(h.e.held) == 1
	})
	if g := h.generated("keep-1"); g != frozen || g >= 150 {
		t.Fatalf("tokens moved while paused: %d -> %d", frozen, g)
	}
	if code, _, _ := h.post("/resume", nil); code != 200 {
		t.Fatal("resume failed")
	}
	c := decodeCompletion(t, recv(t, ch))
	if *c.FinishReason != "length" || len(c.TokenWeightVersions) != 150 {
		t.Fatalf("finish %s, %d versions", *c.FinishReason, len(c.TokenWeightVersions))
	}
	v := c.TokenWeightVersions
	if v[0] != 0 || v[len(v)-1] != 1 || !slices.IsSorted(v) || c.WeightVersion != 1 {
		t.Fatalf("token_weight_versions should go 0…0 1…1, got first %d last %d sorted %v (weight_version %d)", v[0], v[len(v)-1], slices.IsSorted(v), c.WeightVersion)
	}
	if n0 := slices.Index(v, 1); n0 < frozen {
		t.Fatalf("version 1 appears at token %d, before the %d tokens made pre-pause", n0, frozen)
	}
	c2 := decodeCompletion(t, recv(t, ch2))
	if c2.WeightVersion != 1 {
		t.Fatalf("held request served by version %d", c2.WeightVersion)
	}
}

func TestPauseAbortReturnsPartial(t *testing.T) {
	h := newHarness(t, slowConfig())
	body, hdr := longReq("abort-1")
	ch := h.postAsync("/v1/completions", body, hdr...)
	eventually(t, "first tokens", func() bool { return h.generated("abort-1") > 0 })
	if code, _, out := h.post("/pause?mode=abort&clear_cache=true", nil); code != 200 {
		t.Fatalf("pause: %d %s", code, out)
	}
	c := decodeCompletion(t, recv(t, ch))
	if *c.FinishReason != "abort" || len(c.TokenWeightVersions) == 0 || len(c.TokenWeightVersions) >= 150 {
		t.Fatalf("abort: finish %s with %d tokens", *c.FinishReason, len(c.TokenWeightVersions))
	}
	if !h.e.IsPaused() {
		t.Fatal("abort-mode pause did not stay paused")
	}
	ch2 := h.postAsync("/v1/completions", map[string]any{"prompt": "after", "max_tokens": 3}, "X-Request-Id", "abort-2")
	eventually(t, "held", func() bool { h.e.mu.Lock(); defer h.e.mu.Unlock(); return len(h.e.held) == 1 })
	h.post("/resume", nil)
	if c2 := decodeCompletion(t, recv(t, ch2)); *c2.FinishReason != "length" {
		t.Fatalf("after resume: %s", *c2.FinishReason)
	}
}

func TestPauseWaitDrainsThenHolds(t *testing.T) {
	h := newHarness(t, slowConfig())
	body, hdr := longReq("wait-1")
	ch := h.postAsync("/v1/completions", body, hdr...)
	eventually(t, "first tokens", func() bool { return h.generated("wait-1") > 0 })
	pause := h.postAsync("/pause?mode=wait", nil)
	eventually(t, "paused", h.e.IsPaused)
	ch2 := h.postAsync("/v1/completions", map[string]any{"prompt": "new", "max_tokens": 3}, "X-Request-Id", "wait-2")
	if r := recv(t, pause); r.code != 200 {
		t.Fatalf("pause wait: %d %s", r.code, r.body)
	}
	// The pause returned only after the in-flight request completed.
	c := decodeCompletion(t, recv(t, ch))
	if *c.FinishReason != "length" || len(c.TokenWeightVersions) != 150 {
		t.Fatalf("in-flight under wait: %s after %d tokens", *c.FinishReason, len(c.TokenWeightVersions))
	}
	eventually(t, "new request held", func() bool { h.e.mu.Lock(); defer h.e.mu.Unlock(); return len(h.e.held) == 1 })
	select {
	case r := <-ch2:
		t.Fatalf("request admitted while paused: %d %s", r.code, r.body)
	default:
	}
	h.post("/resume", nil)
	if c2 := decodeCompletion(t, recv(t, ch2)); *c2.FinishReason != "length" {
		t.Fatalf("held request: %s", *c2.FinishReason)
	}
	if _, out := h.get("/is_paused"); !strings.Contains(string(out), `"is_paused":false`) {
		t.Fatalf("is_paused after resume = %s", out)
	}
}

func TestAbortRequests(t *testing.T) {
	h := newHarness(t, slowConfig())
	b1, h1 := longReq("a-1")
	b2, h2 := longReq("a-2")
	ch1 := h.postAsync("/v1/completions", b1, h1...)
	ch2 := h.postAsync("/v1/completions", b2, h2...)
	eventually(t, "both running", func() bool { return h.generated("a-1") > 0 && h.generated("a-2") > 0 })
	code, _, out := h.post("/abort_requests", map[string]any{"request_ids": []string{"a-1"}})
	if code != 200 {
		t.Fatalf("abort: %d %s", code, out)
	}
	if c := decodeCompletion(t, recv(t, ch1)); *c.FinishReason != "abort" {
		t.Fatalf("a-1 finish %s", *c.FinishReason)
	}
	if h.generated("a-2") < 0 {
		t.Fatal("a-2 was aborted too")
	}
	h.post("/abort_requests", map[string]any{"request_ids": []string{}}) // all
	if c := decodeCompletion(t, recv(t, ch2)); *c.FinishReason != "abort" {
		t.Fatalf("a-2 finish %s", *c.FinishReason)
	}
}

func TestSleepWake(t *testing.T) {
	h := newHarness(t, testConfig())
	h.post("/sleep", nil)
	if _, out := h.get("/is_sleeping"); !strings.Contains(string(out), "true") {
		t.Fatalf("is_sleeping %s", out)
	}
	ch := h.postAsync("/v1/completions", map[string]any{"prompt": "zz", "max_tokens": 2})
	eventually(t, "held", func() bool { h.e.mu.Lock(); defer h.e.mu.Unlock(); return len(h.e.held) == 1 })
	h.post("/wake_up", nil)
	decodeCompletion(t, recv(t, ch))
	if _, out := h.get("/is_sleeping"); !strings.Contains(string(out), "false") {
		t.Fatalf("is_sleeping %s", out)
	}
}

func TestWeightsVersionsAndLoRA(t *testing.T) {
	loads := 0
	loader := func(dir string) (Model, error) {
		loads++
		if dir == "missing" {
			return nil, errors.New("no such checkpoint")
		}
		var seed uint64
		fmt.Sscanf(dir, "ckpt-%d", &seed)
		return NewHashModel(seed), nil
	}
	h := newHarness(t, testConfig(), WithLoader(loader))
	for _, p := range []string{"/init_weight_transfer_engine", "/start_weight_update"} {
		if code, _, _ := h.post(p, nil); code != 200 {
			t.Fatalf("%s: %d", p, code)
		}
	}
	if !h.e.Stats().Updating {
		t.Fatal("start_weight_update not tracked")
	}
	code, hdr, out := h.post("/update_weights", UpdateWeightsRequest{CheckpointDir: "ckpt-5", Version: 5})
	if code != 200 || hdr.Get("X-Weight-Version") != "5" || h.e.Version() != 5 {
		t.Fatalf("update: %d %s", code, out)
	}
	h.post("/finish_weight_update", nil)
	if h.e.Stats().Updating {
		t.Fatal("finish_weight_update not tracked")
	}
	r := h.complete(map[string]any{"prompt": "v", "max_tokens": 2, "ignore_eos": true})
	if r.Choices[0].WeightVersion != 5 || !slices.Equal(r.Choices[0].TokenWeightVersions, []int64{5, 5}) {
		t.Fatalf("served version %+v", r.Choices[0].Extensions)
	}
	before := loads
	code, _, out = h.post("/update_weights", UpdateWeightsRequest{CheckpointDir: "ckpt-3", Version: 3})
	if code != http.StatusConflict || errorBody(t, out).Code != 409 || loads != before {
		t.Fatalf("decrease: %d %s (loads %d -> %d)", code, out, before, loads)
	}
	if err := h.e.SetModel(NewHashModel(9), 4); !errors.Is(err, ErrVersionDecrease) {
		t.Fatalf("SetModel decrease: %v", err)
	}
	if code, _, _ := h.post("/update_weights", UpdateWeightsRequest{CheckpointDir: "missing", Version: 6}); code != 400 {
		t.Fatalf("failed load: %d", code)
	}
	if code, out := h.get("/get_world_size"); code != 200 || !strings.Contains(string(out), `"world_size":1`) {
		t.Fatalf("world size %s", out)
	}
	_, metrics := h.get("/metrics")
	if !strings.Contains(string(metrics), `asyncrl_engine_weight_version{model_name="asyncrl-policy"} 5`) {
		t.Fatal("weight version metric not 5")
	}

	// LoRA: served under its name, listed in /v1/models, 404 after unload.
	if code, _, out := h.post("/v1/load_lora_adapter", LoRARequest{LoRAName: "sql", LoRAPath: "ckpt-11"}); code != 200 {
		t.Fatalf("load lora: %d %s", code, out)
	}
	if _, out := h.get("/v1/models"); !strings.Contains(string(out), `"id":"sql"`) {
		t.Fatalf("models %s", out)
	}
	lr := h.complete(map[string]any{"model": "sql", "prompt": "v", "max_tokens": 6, "ignore_eos": true, "seed": 1, "return_token_ids": true})
	br := h.complete(map[string]any{"prompt": "v", "max_tokens": 6, "ignore_eos": true, "seed": 1, "return_token_ids": true})
	if lr.Model != "sql" || slices.Equal(lr.Choices[0].TokenIDs, br.Choices[0].TokenIDs) {
		t.Fatalf("lora served the base model: %v vs %v", lr.Choices[0].TokenIDs, br.Choices[0].TokenIDs)
	}
	h.post("/v1/unload_lora_adapter", LoRARequest{LoRAName: "sql"})
	if code, _, _ := h.post("/v1/completions", map[string]any{"model": "sql", "prompt": "v"}); code != 404 {
		t.Fatalf("unloaded lora: %d", code)
	}
}

func TestHealthBeforeWeights(t *testing.T) {
	cfg := testConfig()
	e, err := New(cfg, nil, WithLoader(func(string) (Model, error) { return NewHashModel(3), nil }))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	h := &harness{t: t, e: e}
	srv := newTestServer(t, e)
	h.srv = srv
	if code, _ := h.get("/health"); code != http.StatusServiceUnavailable {
		t.Fatalf("health before load: %d", code)
	}
	if code, _, out := h.post("/v1/completions", map[string]any{"prompt": "x"}); code != 503 || errorBody(t, out).Code != 503 {
		t.Fatalf("completion before load: %d", code)
	}
	if err := e.LoadWeights("any", 1); err != nil {
		t.Fatal(err)
	}
	if code, _ := h.get("/health"); code != 200 {
		t.Fatalf("health after load: %d", code)
	}
}

func TestBadRequests(t *testing.T) {
	cfg := testConfig()
	cfg.MaxModelLen = 64
	h := newHarness(t, cfg)
	long := strings.Repeat("a", 80)
	cases := []struct {
		name, path string
		body       any
		status     int
		param      string
	}{
		{"malformed", "/v1/completions", `{"prompt": `, 400, ""},
		{"wrong type", "/v1/completions", `{"prompt": "x", "max_tokens": "ten"}`, 400, ""},
		{"no prompt", "/v1/completions", map[string]any{"max_tokens": 3}, 400, "prompt"},
		{"max_tokens 0", "/v1/completions", map[string]any{"prompt": "x", "max_tokens": 0}, 400, "max_tokens"},
		{"max_tokens <0", "/v1/completions", map[string]any{"prompt": "x", "max_tokens": -4}, 400, "max_tokens"},
		{"prompt too long", "/v1/completions", map[string]any{"prompt": long, "max_tokens": 1}, 400, "prompt"},
		{"prompt+max too long", "/v1/completions", map[string]any{"prompt": "abc", "max_tokens": 62}, 400, "prompt"},
		{"bad token id", "/v1/completions", map[string]any{"prompt": []int{1, 500}}, 400, "prompt"},
		{"top_p > 1", "/v1/completions", map[string]any{"prompt": "x", "top_p": 1.5}, 400, "top_p"},
		{"top_p 0", "/v1/completions", map[string]any{"prompt": "x", "top_p": 0}, 400, "top_p"},
		{"temperature < 0", "/v1/completions", map[string]any{"prompt": "x", "temperature": -1}, 400, "temperature"},
		{"top_k < -1", "/v1/completions", map[string]any{"prompt": "x", "top_k": -2}, 400, "top_k"},
		{"min_p > 1", "/v1/completions", map[string]any{"prompt": "x", "min_p": 2}, 400, "min_p"},
		{"n 0", "/v1/completions", map[string]any{"prompt": "x", "n": 0}, 400, "n"},
		{"bad stop", "/v1/completions", map[string]any{"prompt": "x", "stop": 5}, 400, "stop"},
		{"unknown model", "/v1/completions", map[string]any{"model": "gpt-9", "prompt": "x"}, 404, "model"},
		{"chat malformed", "/v1/chat/completions", `[`, 400, ""},
		{"chat no messages", "/v1/chat/completions", map[string]any{"messages": []any{}}, 400, "messages"},
		{"chat n 0", "/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": "x"}}, "n": 0}, 400, "n"},
		{"chat too long", "/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": long}}}, 400, "prompt"},
		{"chat unknown model", "/v1/chat/completions", map[string]any{"model": "nope", "messages": []map[string]string{{"role": "user", "content": "x"}}}, 404, "model"},
		{"pause mode", "/pause?mode=sometimes", nil, 400, "mode"},
		{"update no dir", "/update_weights", map[string]any{"version": 3}, 400, "checkpoint_dir"},
		{"abort malformed", "/abort_requests", `{"request_ids": 3}`, 400, ""},
	}
	for _, tc := range cases {
		code, _, out := h.post(tc.path, tc.body)
		if code != tc.status {
			t.Errorf("%s: status %d, want %d (%s)", tc.name, code, tc.status, out)
			continue
		}
		d := errorBody(t, out)
		if d.Code != tc.status || d.Message == "" || d.Type == "" {
			t.Errorf("%s: error %+v", tc.name, d)
		}
		if tc.param != "" && (d.Param == nil || *d.Param != tc.param) {
			t.Errorf("%s: param %v, want %q", tc.name, d.Param, tc.param)
		}
	}
}

func TestQueueFull429(t *testing.T) {
	cfg := testConfig()
	cfg.Latency.MaxWaiting = 2
	h := newHarness(t, cfg)
	h.post("/pause?mode=keep", nil)
	ch := h.postAsync("/v1/completions", map[string]any{"prompt": "x", "max_tokens": 2, "n": 2})
	eventually(t, "held", func() bool { h.e.mu.Lock(); defer h.e.mu.Unlock(); return len(h.e.held) == 2 })
	code, _, out := h.post("/v1/completions", map[string]any{"prompt": "y", "max_tokens": 2})
	if code != http.StatusTooManyRequests || errorBody(t, out).Code != 429 {
		t.Fatalf("full queue: %d %s", code, out)
	}
	h.post("/resume", nil)
	decodeCompletion(t, recv(t, ch))
	// With the queue drained the same request is accepted again.
	h.complete(map[string]any{"prompt": "y", "max_tokens": 2})
}

func TestMetricsMove(t *testing.T) {
	h := newHarness(t, testConfig())
	prompt := strings.Repeat("shared prefix ", 5) // 70 chars + BOS = 71 tokens
	for i := 0; i < 2; i++ {
		h.complete(map[string]any{"prompt": prompt, "max_tokens": 3, "ignore_eos": true})
	}
	_, body := h.get("/metrics")
	text := string(body)
	for _, name := range []string{
		"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
		"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_total",
		"vllm:generation_tokens_total", "vllm:time_to_first_token_seconds_count", "vllm:e2e_request_latency_seconds_count",
		"asyncrl_engine_weight_version", "vllm:num_preemptions_total",
	} {
		if !strings.Contains(text, name) {
			t.Errorf("metric %s missing", name)
		}
	}
	// 71 tokens: 4 full blocks cacheable, the second request hits all 64.
	for _, want := range []string{
		`vllm:prefix_cache_queries_total{model_name="asyncrl-policy"} 142`,
		`vllm:prefix_cache_hits_total{model_name="asyncrl-policy"} 64`,
		`vllm:prompt_tokens_total{model_name="asyncrl-policy"} 142`,
		`vllm:generation_tokens_total{model_name="asyncrl-policy"} 6`,
		`vllm:time_to_first_token_seconds_count{model_name="asyncrl-policy"} 2`,
		`vllm:e2e_request_latency_seconds_count{model_name="asyncrl-policy"} 2`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if st := h.e.Stats(); st.PrefixHits != 64 || st.GenerationTokens != 6 || st.Running != 0 || !st.Loaded || st.Paused {
		t.Fatalf("Stats %+v", st)
	}
	// The usage block reports the hit too.
	r := h.complete(map[string]any{"prompt": prompt, "max_tokens": 1})
	if r.Usage.PromptTokensDetails.CachedTokens != 64 {
		t.Fatalf("cached_tokens %d, want 64", r.Usage.PromptTokensDetails.CachedTokens)
	}
	h.post("/reset_prefix_cache", nil)
	if r := h.complete(map[string]any{"prompt": prompt, "max_tokens": 1}); r.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("cached after reset: %d", r.Usage.PromptTokensDetails.CachedTokens)
	}
}

func TestServeAndShutdown(t *testing.T) {
	e, err := New(testConfig(), NewHashModel(1))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- e.ListenAndServe(ctx, "127.0.0.1:0") }()
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.SetModel(NewHashModel(2), 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("SetModel after shutdown: %v", err)
	}
}

// A cache far smaller than the offered load queues and preempts, never
// errors, and preemption does not change what a seeded request generates.
func TestTinyCacheQueuesAndPreempts(t *testing.T) {
	cfg := testConfig()
	cfg.MaxModelLen = 128
	cfg.Latency.CacheBlocks = 8
	h := newHarness(t, cfg)
	req := func(i int) map[string]any {
		return map[string]any{"prompt": fmt.Sprintf("request number %d", i), "max_tokens": 60, "ignore_eos": true, "seed": i, "return_token_ids": true}
	}
	alone := map[int][]int32{}
	for i := 0; i < 6; i++ {
		alone[i] = h.complete(req(i)).Choices[0].TokenIDs
	}
	// Hold all six behind a pause so they compete for the cache at once.
	h.post("/pause?mode=keep", nil)
	var chans []<-chan result
	for i := 0; i < 6; i++ {
		chans = append(chans, h.postAsync("/v1/completions", req(i)))
	}
	eventually(t, "all held", func() bool { return h.e.Stats().Held == 6 })
	h.post("/resume", nil)
	for i, ch := range chans {
		c := decodeCompletion(t, recv(t, ch))
		if *c.FinishReason != "length" || !slices.Equal(c.TokenIDs, alone[i]) {
			t.Fatalf("request %d under pressure: %s, tokens differ from the lone run", i, *c.FinishReason)
		}
	}
	st := h.e.Stats()
	if st.Preemptions == 0 {
		t.Fatal("expected preemptions with 8 blocks for 6 concurrent 80-token sequences")
	}
	if st.BlocksUsed != 0 || st.Running != 0 || st.Waiting != 0 {
		t.Fatalf("not drained: %+v", st)
	}
}
