package driver_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/engine/driver"
	"github.com/asyncrl/asyncrl/engine/enginetest"
)

var ctx = context.Background()

func newDriver(t *testing.T, kind driver.Kind, u string) driver.Driver {
	t.Helper()
	d, err := driver.New(kind, u, driver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func routeError(t *testing.T, err error) *driver.RouteError {
	t.Helper()
	var re *driver.RouteError
	if !errors.As(err, &re) {
		t.Fatalf("want a *RouteError, got %v", err)
	}
	return re
}

func TestNew(t *testing.T) {
	if _, err := driver.New("tgi", "http://x:1", driver.Options{}); err == nil {
		t.Fatal("unknown kind accepted")
	}
	if _, err := driver.New(driver.KindVLLM, "x:1", driver.Options{}); err == nil {
		t.Fatal("URL without scheme accepted")
	}
	d, err := driver.New(driver.KindBuiltin, "http://127.0.0.1:9/", driver.Options{})
	if err != nil || d.Kind() != driver.KindBuiltin || d.URL() != "http://127.0.0.1:9" {
		t.Fatalf("builtin driver: %v %v", d, err)
	}
}

// Without VLLM_SERVER_DEV_MODE=1 vLLM answers 404 on every dev route; the
// error names the engine, the route and the variable that fixes it.
func TestVLLMDevModeOff(t *testing.T) {
	f := enginetest.NewFake(driver.KindVLLM, enginetest.FakeOptions{LoRA: true, Extension: true})
	defer f.Close()
	d := newDriver(t, driver.KindVLLM, f.URL)
	for name, call := range map[string]func() error{
		"POST /pause":          func() error { return d.Pause(ctx, driver.PauseKeep, false) },
		"POST /resume":         func() error { return d.Resume(ctx) },
		"POST /collective_rpc": func() error { return d.LoadCheckpoint(ctx, "/ckpt", 1) },
		"POST /sleep":          func() error { return d.Sleep(ctx, 1) },
	} {
		re := routeError(t, call())
		if re.Status != 404 || re.Route != name || re.Hint != driver.HintDevMode || re.Engine != f.URL {
			t.Fatalf("%s: %+v", name, re)
		}
		if msg := re.Error(); !strings.Contains(msg, f.URL) || !strings.Contains(msg, name) || !strings.Contains(msg, "VLLM_SERVER_DEV_MODE=1") {
			t.Fatalf("message %q lacks the URL, route or hint", msg)
		}
	}
	// The serving routes still work.
	if err := d.Health(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestVLLMLoRAOff(t *testing.T) {
	f := enginetest.NewFake(driver.KindVLLM, enginetest.FakeOptions{DevMode: true})
	defer f.Close()
	re := routeError(t, newDriver(t, driver.KindVLLM, f.URL).LoadLoRA(ctx, "policy", "/ckpt/lora"))
	if re.Status != 404 || re.Route != "POST /v1/load_lora_adapter" || re.Hint != driver.HintLoRA {
		t.Fatalf("%+v", re)
	}
}

func TestVLLMExtensionMissing(t *testing.T) {
	f := enginetest.NewFake(driver.KindVLLM, enginetest.FakeOptions{DevMode: true})
	defer f.Close()
	d := newDriver(t, driver.KindVLLM, f.URL)
	for _, err := range []error{d.LoadCheckpoint(ctx, "/ckpt", 1), d.ApplyDelta(ctx, "/d", 2)} {
		re := routeError(t, err)
		if re.Status != 500 || re.Hint != driver.HintExtension || !strings.Contains(re.Message, "has no attribute 'asyncrl_") {
			t.Fatalf("%+v", re)
		}
	}
	if _, err := d.ServedVersion(ctx); routeError(t, err).Hint != driver.HintExtension {
		t.Fatalf("served version: %v", err)
	}
	if len(d.Swaps()) != 0 {
		t.Fatalf("failed loads were recorded: %v", d.Swaps())
	}
}

// The driver sends vLLM's exact query strings and bodies.
func TestVLLMRequests(t *testing.T) {
	f := enginetest.NewFake(driver.KindVLLM, enginetest.FakeOptions{DevMode: true, LoRA: true, Extension: true, Workers: 2})
	defer f.Close()
	d := newDriver(t, driver.KindVLLM, f.URL)
	if err := d.Pause(ctx, driver.PauseKeep, false); err != nil {
		t.Fatal(err)
	}
	c, _ := f.Last("/pause")
	if q, _ := url.ParseQuery(c.Query); q.Get("mode") != "keep" || q.Get("clear_cache") != "false" {
		t.Fatalf("pause query %q", c.Query)
	}
	if p, err := d.IsPaused(ctx); err != nil || !p {
		t.Fatalf("is_paused %v %v", p, err)
	}
	if err := d.Pause(ctx, "later", false); err == nil {
		t.Fatal("bad pause mode accepted")
	}
	if err := d.Sleep(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if c, _ := f.Last("/sleep"); c.Query != "level=2" {
		t.Fatalf("sleep query %q", c.Query)
	}
	if err := d.Sleep(ctx, 3); err == nil {
		t.Fatal("sleep level 3 accepted")
	}
	if err := d.LoadLoRA(ctx, "policy", "/ckpt/lora-3"); err != nil {
		t.Fatal(err)
	}
	c, _ = f.Last("/v1/load_lora_adapter")
	var lora map[string]any
	_ = json.Unmarshal(c.Body, &lora)
	if lora["lora_name"] != "policy" || lora["lora_path"] != "/ckpt/lora-3" || lora["load_inplace"] != true {
		t.Fatalf("load_lora_adapter body %s", c.Body)
	}
	if err := d.LoadCheckpoint(ctx, "/ckpt/full-7", 7); err != nil {
		t.Fatal(err)
	}
	c, _ = f.Last("/collective_rpc")
	var rpc struct {
		Method string   `json:"method"`
		Args   []string `json:"args"`
	}
	if err := json.Unmarshal(c.Body, &rpc); err != nil || rpc.Method != driver.RPCLoadCheckpoint || !slices.Equal(rpc.Args, []string{"/ckpt/full-7", "7"}) {
		t.Fatalf("collective_rpc body %s (%v)", c.Body, err)
	}
	if v, err := d.ServedVersion(ctx); err != nil || v != 7 {
		t.Fatalf("served version %d %v", v, err)
	}
	if err := d.ApplyDelta(ctx, "/sync/delta-00000008", 8); err != nil {
		t.Fatal(err)
	}
	if s := d.Swaps(); len(s) != 2 || s[0].Version != 7 || s[1].Version != 8 {
		t.Fatalf("swap record %v", s)
	}
}

// collective_rpc answers one result per worker; they must agree.
func TestVLLMWorkersDisagree(t *testing.T) {
	f := enginetest.NewFake(driver.KindVLLM, enginetest.FakeOptions{DevMode: true, Extension: true, Workers: 4, Skew: true})
	defer f.Close()
	d := newDriver(t, driver.KindVLLM, f.URL)
	err := d.LoadCheckpoint(ctx, "/ckpt", 5)
	if err == nil || !strings.Contains(err.Error(), "disagree") {
		t.Fatalf("disagreeing workers: %v", err)
	}
	if _, err := d.ServedVersion(ctx); err == nil || !strings.Contains(err.Error(), "worker 3 reports 4") {
		t.Fatalf("served version with disagreeing workers: %v", err)
	}
}

func TestVLLMMetricsFixture(t *testing.T) {
	f := enginetest.NewFake(driver.KindVLLM, enginetest.FakeOptions{})
	defer f.Close()
	m, err := newDriver(t, driver.KindVLLM, f.URL).Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := enginetest.MustFixtures(driver.KindVLLM)["metrics"].Expect
	if m.Running != want["running"] || m.Waiting != want["waiting"] || m.KVCacheUsage != want["kv_cache_usage"] ||
		m.PrefixHits != want["prefix_hits"] || m.PrefixQueries != want["prefix_queries"] {
		t.Fatalf("metrics %+v, want %v", m, want)
	}
	if m.PrefixHitRate != want["prefix_hits"]/want["prefix_queries"] {
		t.Fatalf("hit rate %v", m.PrefixHitRate)
	}
	if m.Raw["vllm:time_to_first_token_seconds_count"] != 4 {
		t.Fatalf("histogram count %v", m.Raw["vllm:time_to_first_token_seconds_count"])
	}
}

func TestVLLMGenerateFixture(t *testing.T) {
	f := enginetest.NewFake(driver.KindVLLM, enginetest.FakeOptions{})
	defer f.Close()
	d := newDriver(t, driver.KindVLLM, f.URL)
	seed := int64(3)
	res, err := d.Generate(ctx, driver.GenerateRequest{PromptIDs: []int32{151643, 9707, 11}, MaxTokens: 2, Temperature: 1, TopP: 0.9, TopK: 20, Stop: []string{"\n"}, Seed: &seed})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.TokenIDs, []int32{279, 1156}) || !slices.Equal(res.PromptIDs, []int32{151643, 9707, 11}) ||
		!slices.Equal(res.Logprobs, []float32{-0.5234, -1.2031}) || res.FinishReason != "length" || res.TokenVersions != nil {
		t.Fatalf("%+v", res)
	}
	c, _ := f.Last("/v1/completions")
	var body map[string]any
	_ = json.Unmarshal(c.Body, &body)
	// The model name came from /v1/models; the fields are vLLM's.
	for k, v := range map[string]any{"model": "Qwen/Qwen3-0.6B", "max_tokens": 2.0, "top_p": 0.9, "top_k": 20.0, "seed": 3.0,
		"logprobs": 0.0, "return_token_ids": true, "return_tokens_as_token_ids": true} {
		if body[k] != v {
			t.Fatalf("completions body %s: %s = %v, want %v", c.Body, k, body[k], v)
		}
	}
	if _, err := d.Generate(ctx, driver.GenerateRequest{MaxTokens: 2}); err == nil {
		t.Fatal("empty prompt accepted")
	}
}

func TestSGLang(t *testing.T) {
	f := enginetest.NewFake(driver.KindSGLang, enginetest.FakeOptions{LoRA: true})
	defer f.Close()
	d := newDriver(t, driver.KindSGLang, f.URL)
	if err := d.ApplyDelta(ctx, "/sync/delta-00000002", 2); !errors.Is(err, driver.ErrUnsupported) || !strings.Contains(err.Error(), "weight_load") {
		t.Fatalf("ApplyDelta: %v", err)
	}
	if _, err := d.ServedVersion(ctx); err == nil {
		t.Fatal("a served version before any load")
	}
	if err := d.LoadCheckpoint(ctx, "/ckpt/full-3", 3); err != nil {
		t.Fatal(err)
	}
	c, _ := f.Last("/update_weights_from_disk")
	var body map[string]any
	_ = json.Unmarshal(c.Body, &body)
	if body["model_path"] != "/ckpt/full-3" || body["weight_version"] != "3" {
		t.Fatalf("update_weights_from_disk body %s", c.Body)
	}
	if v, err := d.ServedVersion(ctx); err != nil || v != 3 {
		t.Fatalf("served %d %v", v, err)
	}
	if err := d.Pause(ctx, driver.PauseKeep, false); err != nil {
		t.Fatal(err)
	}
	if c, _ := f.Last("/pause_generation"); string(c.Body) != `{"mode":"in_place"}` {
		t.Fatalf("pause body %s", c.Body)
	}
	if err := d.Pause(ctx, driver.PauseWait, false); !errors.Is(err, driver.ErrUnsupported) {
		t.Fatalf("pause wait: %v", err)
	}
	if err := d.Pause(ctx, driver.PauseAbort, true); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Last("/flush_cache"); !ok {
		t.Fatal("clear_cache did not flush")
	}
	// A paused SGLang holds new generations until it continues.
	if err := d.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := d.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := enginetest.MustFixtures(driver.KindSGLang)["metrics"].Expect
	if m.Running != want["running"] || m.Waiting != want["waiting"] || m.KVCacheUsage != want["kv_cache_usage"] || m.PrefixHitRate != want["prefix_hit_rate"] {
		t.Fatalf("metrics %+v, want %v", m, want)
	}
	res, err := d.Generate(ctx, driver.GenerateRequest{PromptIDs: []int32{151643, 9707, 11}, MaxTokens: 2, Temperature: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.TokenIDs, []int32{279, 1156}) || !slices.Equal(res.Logprobs, []float32{-0.5234, -1.2031}) || res.FinishReason != "length" {
		t.Fatalf("%+v", res)
	}
	if err := d.LoadLoRA(ctx, "policy", "/ckpt/lora-3"); err != nil {
		t.Fatal(err)
	}
	if err := d.Sleep(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := d.WakeUp(ctx); err != nil {
		t.Fatal(err)
	}
}

// The record bounds the versions a token generated in a window can have.
func TestVersionsDuring(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	f := enginetest.NewFake(driver.KindVLLM, enginetest.FakeOptions{DevMode: true, Extension: true})
	defer f.Close()
	// The driver reads its clock at the start and end of each load.
	// Swaps at [10,12] → 1 and [20,25] → 2.
	clock := []time.Time{at(10), at(12), at(20), at(25)}
	i := 0
	d, _ := driver.New(driver.KindVLLM, f.URL, driver.Options{Now: func() time.Time { t := clock[i]; i++; return t }})
	if o, n := d.VersionsDuring(at(0), at(100)); o != -1 || n != -1 {
		t.Fatalf("empty record: %d %d", o, n)
	}
	if err := d.LoadCheckpoint(ctx, "/c", 1); err != nil {
		t.Fatal(err)
	}
	if err := d.ApplyDelta(ctx, "/d", 2); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		start, end     int
		oldest, newest int64
	}{
		{0, 5, -1, -1}, // before any swap
		{13, 19, 1, 1}, // between the swaps
		{11, 15, 1, 1}, // during the first swap: only 1 known
		{13, 22, 1, 2}, // the second swap began in the window
		{26, 30, 2, 2}, // after both
		{21, 30, 1, 2}, // the second swap had not ended at start
		{0, 100, 1, 2}, // everything
	} {
		if o, n := d.VersionsDuring(at(tc.start), at(tc.end)); o != tc.oldest || n != tc.newest {
			t.Errorf("[%d,%d]: %d..%d, want %d..%d", tc.start, tc.end, o, n, tc.oldest, tc.newest)
		}
	}
}

// TestSwapRecordBounded (issue 37): a run swaps weights every step for
// days; the record keeps the newest SwapsKept swaps, in start order even
// when loads complete out of order, and answers VersionsDuring from them.
func TestSwapRecordBounded(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := enginetest.NewFake(driver.KindVLLM, enginetest.FakeOptions{DevMode: true, Extension: true})
	defer f.Close()
	n := driver.SwapsKept + 50
	// Each load reads the clock at its start and end: swap v runs
	// [2v, 2v+1] seconds.
	calls := 0
	d, _ := driver.New(driver.KindVLLM, f.URL, driver.Options{Now: func() time.Time {
		s := calls/2*2 + calls%2
		calls++
		return t0.Add(time.Duration(s) * time.Second)
	}})
	for v := 1; v <= n; v++ {
		if err := d.ApplyDelta(ctx, "/d", int64(v)); err != nil {
			t.Fatal(err)
		}
	}
	s := d.Swaps()
	if len(s) != driver.SwapsKept || s[0].Version != int64(n-driver.SwapsKept+1) || s[len(s)-1].Version != int64(n) {
		t.Fatalf("%d swaps recorded, versions %d..%d; want the newest %d (%d..%d)", len(s), s[0].Version, s[len(s)-1].Version,
			driver.SwapsKept, n-driver.SwapsKept+1, n)
	}
	for i := 1; i < len(s); i++ {
		if s[i].Start.Before(s[i-1].Start) {
			t.Fatalf("record out of start order at %d: %v", i, s[i-1:i+1])
		}
	}
	last := t0.Add(time.Duration(2*n) * time.Second)
	if o, nw := d.VersionsDuring(last, last.Add(time.Second)); o != int64(n) || nw != int64(n) {
		t.Fatalf("after the last swap: %d..%d, want %d", o, nw, n)
	}
}
