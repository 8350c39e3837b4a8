package driver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// SGLang hints.
const (
	HintSGLangDelta   = "SGLang cannot apply a SkyRL delta in place: set weight_load to full for SGLang engines"
	HintSGLangLoRA    = "start SGLang with --enable-lora (and --max-loras-per-batch, --max-lora-rank, --lora-target-modules for adapters loaded at run time)"
	HintSGLangMetrics = "start SGLang with --enable-metrics"
	HintSGLangSleep   = "start SGLang with --enable-memory-saver"
)

func sglangHint(route string, status int, msg string) string {
	low := strings.ToLower(msg)
	switch {
	case strings.HasSuffix(route, "_lora_adapter") && (status == http.StatusNotFound || strings.Contains(low, "lora")):
		return HintSGLangLoRA
	case route == "/metrics" && status == http.StatusNotFound:
		return HintSGLangMetrics
	case (route == "/release_memory_occupation" || route == "/resume_memory_occupation") && strings.Contains(low, "memory_saver"):
		return HintSGLangSleep
	case route == "/flush_cache" && status == http.StatusBadRequest:
		return "SGLang flushes its cache only with no running or waiting requests: pause with mode abort first"
	case route == "/health" && status == http.StatusServiceUnavailable:
		return "SGLang's /health runs a one-token generation and answers 503 when the scheduler sends nothing for SGLANG_HEALTH_CHECK_TIMEOUT (20 s): a server left paused (a run stopped mid-swap) does that; POST /continue_generation to it, or restart it"
	case strings.HasPrefix(route, "/update_weights_from_disk") && status >= 500:
		return "SGLang's scheduler may have asserted (\"Cache flush failed after updating weights\": a flush with requests running); it must be restarted"
	}
	return ""
}

// sglangDriver drives SGLang over its native HTTP API
// (python/sglang/srt/entrypoints/http_server.py).
type sglangDriver struct {
	*base
	// Under base.mu: the release read once (capabilities), the mode the
	// engine is paused in ("" when running), whether the cache was
	// flushed since that pause, and the names known to be the base
	// model: checkpoint paths loaded (SGLang serves the base model under
	// the last one's path) and names found in Models.
	caps     Capabilities
	capsRead bool
	paused   PauseMode
	flushed  bool
	loaded   map[string]bool
}

func newSGLang(url string, opts Options) (Driver, error) {
	b, err := newBase(KindSGLang, url, opts, sglangHint)
	if err != nil {
		return nil, err
	}
	return &sglangDriver{base: b, loaded: map[string]bool{}}, nil
}

// sglangPauseModes maps our modes onto PauseGenerationReqInput.mode:
// keep is in_place (the requests stay in the running batch with their KV
// and continue after /continue_generation).
var sglangPauseModes = map[PauseMode]string{PauseAbort: "abort", PauseKeep: "in_place"}

// flushPoll is how often the driver asks /flush_cache again while the
// aborted requests are still leaving the running batch.
const flushPoll = 5 * time.Millisecond

// Pause pauses generation. The order is what keeps SGLang's scheduler
// from asserting on a weight update (its "Cache flush failed after
// updating weights" kills the server when it flushes with requests in the
// running batch, scheduler_update_weights_mixin.py):
//   - abort: the abort is asynchronous (the aborted requests leave the
//     batch at their next step), so with clearCache the driver asks
//     /flush_cache until it answers 200 — it answers 400, never asserts,
//     while requests remain — and the running batch is then empty for the
//     load that follows;
//   - keep (in_place): the frozen requests stay in the running batch, no
//     flush can succeed, and clearCache is ignored; LoadCheckpoint then
//     loads with flush_cache false. A release without pause modes would
//     abort instead (its /pause_generation reads no body), so keep is
//     refused there with the minimum release.
func (d *sglangDriver) Pause(ctx context.Context, mode PauseMode, clearCache bool) error {
	m, ok := sglangPauseModes[mode]
	if !ok {
		return &UnsupportedError{Engine: d.url, Kind: KindSGLang, Op: fmt.Sprintf("pause mode %q", mode),
			Hint: "SGLang pauses with abort (abort) or in_place (keep); it has no wait mode"}
	}
	if mode == PauseKeep && !d.capabilities(ctx).Has(FeatureSGLangPauseModes) {
		return &UnsupportedError{Engine: d.url, Kind: KindSGLang, Op: "pause mode keep",
			Hint: fmt.Sprintf("SGLang %s has no in_place pause (its /pause_generation always aborts): upgrade to %s or newer, or set trainer.pause_mode: abort",
				d.capabilities(ctx).Release, sglangMin(FeatureSGLangPauseModes))}
	}
	if _, err := d.do(ctx, http.MethodPost, "/pause_generation", nil, map[string]string{"mode": m}, true); err != nil {
		return err
	}
	d.mu.Lock()
	d.paused, d.flushed = mode, false
	d.mu.Unlock()
	if clearCache && mode == PauseAbort {
		return d.flushWhenIdle(ctx)
	}
	return nil
}

// flushWhenIdle asks /flush_cache until it answers 200: the running batch
// is then empty and the radix cache dropped.
func (d *sglangDriver) flushWhenIdle(ctx context.Context) error {
	for {
		err := d.ResetPrefixCache(ctx)
		var re *RouteError
		if err == nil {
			d.mu.Lock()
			d.flushed = true
			d.mu.Unlock()
			return nil
		}
		if !errors.As(err, &re) || re.Status != http.StatusBadRequest {
			return err
		}
		t := time.NewTimer(flushPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("engine %s: waiting for the aborted requests to leave SGLang's running batch: %w (last answer: %w)", d.url, ctx.Err(), err)
		case <-t.C:
		}
	}
}

func (d *sglangDriver) Resume(ctx context.Context) error {
	_, err := d.do(ctx, http.MethodPost, "/continue_generation", nil, map[string]any{}, false)
	if err == nil {
		d.mu.Lock()
		d.paused, d.flushed = "", false
		d.mu.Unlock()
	}
	return err
}

func (d *sglangDriver) IsPaused(ctx context.Context) (bool, error) {
	return false, &UnsupportedError{Engine: d.url, Kind: KindSGLang, Op: "is_paused",
		Hint: "SGLang has no pause-status route; the driver's caller knows whether it paused"}
}

func (d *sglangDriver) ResetPrefixCache(ctx context.Context) error {
	_, err := d.do(ctx, http.MethodPost, "/flush_cache", nil, nil, false)
	return err
}

// Sleep maps onto /release_memory_occupation (SGLang has no levels: it
// releases weights and KV cache; level 1 and 2 both do that).
func (d *sglangDriver) Sleep(ctx context.Context, level int) error {
	if level != 1 && level != 2 {
		return fmt.Errorf("engine %s: sleep level %d (want 1 or 2)", d.url, level)
	}
	_, err := d.do(ctx, http.MethodPost, "/release_memory_occupation", nil, map[string]any{}, true)
	return err
}

func (d *sglangDriver) WakeUp(ctx context.Context) error {
	_, err := d.do(ctx, http.MethodPost, "/resume_memory_occupation", nil, map[string]any{}, true)
	return err
}

// UpdateWeightsFromDiskRequest is SGLang's UpdateWeightFromDiskReqInput
// (python/sglang/srt/managers/io_struct.py), the fields the driver sets.
type UpdateWeightsFromDiskRequest struct {
	ModelPath     string `json:"model_path"`
	WeightVersion string `json:"weight_version,omitempty"`
	FlushCache    bool   `json:"flush_cache"`
}

// SGLangResult is the {"success","message"} answer of SGLang's weight and
// LoRA routes (they answer 400 with success false on failure).
type SGLangResult struct {
	Success *bool  `json:"success"`
	Message string `json:"message"`
}

// LoadCheckpoint loads dir with /update_weights_from_disk. Its flush
// (flush_cache, which the scheduler asserts succeeded) is asked for only
// when no request can be in the running batch: under a keep (in_place)
// pause the frozen requests are, so it loads with flush_cache false;
// under an abort pause it first waits for the aborted requests to leave
// (flushWhenIdle) unless Pause already did; unpaused, SGLang's tokenizer
// manager itself waits for every request in flight before loading.
func (d *sglangDriver) LoadCheckpoint(ctx context.Context, dir string, version int64) error {
	if dir == "" {
		return fmt.Errorf("engine %s: load checkpoint: empty directory", d.url)
	}
	d.mu.Lock()
	paused, flushed := d.paused, d.flushed
	d.mu.Unlock()
	if paused == PauseAbort && !flushed {
		if err := d.flushWhenIdle(ctx); err != nil {
			return err
		}
	}
	start := d.opts.Now()
	var out SGLangResult
	body := UpdateWeightsFromDiskRequest{ModelPath: dir, WeightVersion: strconv.FormatInt(version, 10), FlushCache: paused != PauseKeep}
	if err := d.doJSON(ctx, http.MethodPost, "/update_weights_from_disk", nil, body, &out, true); err != nil {
		return err
	}
	if out.Success == nil || !*out.Success {
		return d.shapeError("POST /update_weights_from_disk", "success is not true: %s", out.Message)
	}
	d.mu.Lock()
	d.loaded[dir] = true
	d.mu.Unlock()
	d.recordSwap(version, start, d.opts.Now())
	return nil
}

func (d *sglangDriver) ApplyDelta(ctx context.Context, dir string, version int64) error {
	return &UnsupportedError{Engine: d.url, Kind: KindSGLang, Op: "apply_delta", Hint: HintSGLangDelta}
}

func (d *sglangDriver) LoadLoRA(ctx context.Context, name, path string) error {
	if name == "" || path == "" {
		return fmt.Errorf("engine %s: LoRA name and path are required", d.url)
	}
	// SGLang has no in-place replace: unload the old adapter first (a
	// missing one is fine), then load.
	_ = d.UnloadLoRA(ctx, name)
	var out SGLangResult
	return d.doJSON(ctx, http.MethodPost, "/load_lora_adapter", nil,
		map[string]string{"lora_name": name, "lora_path": path}, &out, true)
}

func (d *sglangDriver) UnloadLoRA(ctx context.Context, name string) error {
	var out SGLangResult
	return d.doJSON(ctx, http.MethodPost, "/unload_lora_adapter", nil, map[string]string{"lora_name": name}, &out, false)
}

// ServedVersion is the driver's own record for SGLang.
func (d *sglangDriver) ServedVersion(ctx context.Context) (int64, error) {
	v := d.lastVersion()
	if v < 0 {
		return 0, fmt.Errorf("engine %s: no weights loaded through this driver yet (SGLang's served version is the driver's own record)", d.url)
	}
	return v, nil
}

func (d *sglangDriver) Metrics(ctx context.Context) (Metrics, error) {
	return d.metrics(ctx, KindSGLang)
}

// sglangMetrics maps SGLang's metric names (python/sglang/srt/metrics/
// collector.py) onto Metrics.
func sglangMetrics(raw map[string]float64) Metrics {
	return Metrics{
		Running:       raw["sglang:num_running_reqs"],
		Waiting:       raw["sglang:num_queue_reqs"],
		KVCacheUsage:  raw["sglang:token_usage"],
		PrefixHitRate: raw["sglang:cache_hit_rate"],
		Raw:           raw,
	}
}

// SGLangGenerateRequest is the body of SGLang's native POST /generate
// (GenerateReqInput) as the driver sends it.
type SGLangGenerateRequest struct {
	InputIDs       []int32        `json:"input_ids"`
	SamplingParams map[string]any `json:"sampling_params"`
	ReturnLogprob  bool           `json:"return_logprob"`
	LoRAPath       string         `json:"lora_path,omitempty"`
	RID            string         `json:"rid,omitempty"`
}

// SGLangGenerateResponse is the part of /generate's answer the driver reads.
type SGLangGenerateResponse struct {
	Text      string  `json:"text"`
	OutputIDs []int32 `json:"output_ids"`
	MetaInfo  struct {
		ID           string `json:"id"`
		FinishReason *struct {
			Type string `json:"type"`
		} `json:"finish_reason"`
		PromptTokens        int                 `json:"prompt_tokens"`
		CompletionTokens    int                 `json:"completion_tokens"`
		OutputTokenLogprobs [][]json.RawMessage `json:"output_token_logprobs"`
	} `json:"meta_info"`
}

// Generate uses SGLang's native /generate: it takes token ids and returns
// output_ids and per-token [logprob, token_id, text] triples.
func (d *sglangDriver) Generate(ctx context.Context, req GenerateRequest) (GenerateResult, error) {
	if len(req.PromptIDs) == 0 || req.MaxTokens < 1 {
		return GenerateResult{}, fmt.Errorf("engine %s: generate needs a prompt and max_tokens >= 1", d.url)
	}
	sp := map[string]any{"max_new_tokens": req.MaxTokens, "temperature": req.Temperature}
	if req.TopP > 0 {
		sp["top_p"] = req.TopP
	}
	if req.TopK > 0 {
		sp["top_k"] = req.TopK
	}
	if len(req.Stop) > 0 {
		sp["stop"] = req.Stop
	}
	if req.Seed != nil {
		sp["sampling_seed"] = *req.Seed
	}
	body := SGLangGenerateRequest{InputIDs: req.PromptIDs, SamplingParams: sp, ReturnLogprob: true, RID: req.RequestID}
	if req.Model != "" {
		base, err := d.isBaseName(ctx, req.Model)
		if err != nil {
			return GenerateResult{}, err
		}
		if !base {
			body.LoRAPath = req.Model // a loaded adapter is selected by its name
		}
	}
	start := d.opts.Now()
	var out SGLangGenerateResponse
	if err := d.doJSON(ctx, http.MethodPost, "/generate", nil, body, &out, true); err != nil {
		return GenerateResult{}, err
	}
	res := GenerateResult{PromptIDs: append([]int32(nil), req.PromptIDs...), TokenIDs: out.OutputIDs, Start: start, End: d.opts.Now()}
	if out.MetaInfo.FinishReason != nil {
		res.FinishReason = out.MetaInfo.FinishReason.Type
	}
	const route = "POST /generate"
	if out.OutputIDs == nil {
		return res, d.shapeError(route, "answer lacks output_ids")
	}
	if len(out.MetaInfo.OutputTokenLogprobs) != len(out.OutputIDs) {
		return res, d.shapeError(route, "meta_info.output_token_logprobs has %d entries for %d tokens", len(out.MetaInfo.OutputTokenLogprobs), len(out.OutputIDs))
	}
	res.Logprobs = make([]float32, len(out.OutputIDs))
	for i, t := range out.MetaInfo.OutputTokenLogprobs {
		var lp float32
		var id int32
		if len(t) < 2 || json.Unmarshal(t[0], &lp) != nil || json.Unmarshal(t[1], &id) != nil {
			return res, d.shapeError(route, "meta_info.output_token_logprobs[%d] is not [logprob, token_id, ...]", i)
		}
		if id != out.OutputIDs[i] {
			return res, d.shapeError(route, "meta_info.output_token_logprobs[%d] is for token %d, output_ids has %d", i, id, out.OutputIDs[i])
		}
		res.Logprobs[i] = lp
	}
	return res, nil
}
