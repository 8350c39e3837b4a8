package driver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
)

// The methods of asyncrl's vLLM worker extension (integrations/vllm,
// started with --worker-extension-cls asyncrl_vllm.WorkerExtension), called
// through POST /collective_rpc. Arguments travel as strings (vLLM's route
// passes only serialized string args): [dir, version].
const (
	RPCLoadCheckpoint = "asyncrl_load_checkpoint"
	RPCApplyDelta     = "asyncrl_apply_delta"
	RPCLoadedVersion  = "asyncrl_loaded_version"
)

// Hints for the flags that enable vLLM's routes.
const (
	HintDevMode   = "start it with VLLM_SERVER_DEV_MODE=1"
	HintLoRA      = "start it with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=1"
	HintExtension = "start it with --worker-extension-cls asyncrl_vllm.WorkerExtension (pip install integrations/vllm)"
	HintSleep     = "start it with --enable-sleep-mode"
	HintModel     = "the model name must be one of --served-model-name (see GET /v1/models)"
)

// devRoutes are vLLM's routes that exist only with VLLM_SERVER_DEV_MODE=1.
var devRoutes = map[string]bool{
	"/pause": true, "/resume": true, "/is_paused": true, "/reset_prefix_cache": true,
	"/collective_rpc": true, "/sleep": true, "/wake_up": true, "/is_sleeping": true,
	"/abort_requests": true,
}

// vllmHint names what fixes a vLLM route failure.
func vllmHint(route string, status int, msg string) string {
	low := strings.ToLower(msg)
	switch {
	case status == http.StatusNotFound && devRoutes[route]:
		return HintDevMode
	case strings.HasSuffix(route, "_lora_adapter") && (status == http.StatusNotFound || status == http.StatusMethodNotAllowed):
		return HintLoRA
	case strings.HasSuffix(route, "_lora_adapter") && strings.Contains(low, "lora") && strings.Contains(low, "not enabled"):
		return HintLoRA
	case route == "/collective_rpc" && strings.Contains(low, "asyncrl_") &&
		(strings.Contains(low, "no attribute") || strings.Contains(low, "not found") || strings.Contains(low, "unknown method")):
		// The worker lacks the method: the extension is not loaded.
		return HintExtension
	case route == "/sleep" && strings.Contains(low, "sleep mode"):
		return HintSleep
	case route == "/v1/completions" && status == http.StatusNotFound:
		return HintModel
	}
	return ""
}

// vllmDriver drives vLLM (and the built-in engine, which serves the same
// routes) over its dev-mode HTTP API.
type vllmDriver struct {
	*base

	// caps is the engine's capabilities as last probed (nil: not yet).
	capsMu sync.Mutex
	caps   *Capabilities
}

func newVLLM(kind Kind, url string, opts Options) (Driver, error) {
	b, err := newBase(kind, url, opts, vllmHint)
	if err != nil {
		return nil, err
	}
	return &vllmDriver{base: b}, nil
}

func (d *vllmDriver) Pause(ctx context.Context, mode PauseMode, clearCache bool) error {
	switch mode {
	case PauseAbort, PauseKeep, PauseWait:
	default:
		return fmt.Errorf("engine %s: pause mode %q (want abort, keep or wait)", d.url, mode)
	}
	// What the release does with the mode decides the query (see
	// vllmPauseQuery): keep on a release without modes is refused here,
	// never sent to become an abort.
	q, err := vllmPauseQuery(d.url, d.cachedCaps(ctx), mode, clearCache)
	if err != nil {
		return err
	}
	_, err = d.do(ctx, http.MethodPost, "/pause", q, nil, true)
	return err
}

func (d *vllmDriver) Resume(ctx context.Context) error {
	if err := d.noPauseRoute(ctx, "POST /resume"); err != nil {
		return err
	}
	_, err := d.do(ctx, http.MethodPost, "/resume", nil, nil, false)
	return err
}

func (d *vllmDriver) IsPaused(ctx context.Context) (bool, error) {
	if err := d.noPauseRoute(ctx, "GET /is_paused"); err != nil {
		return false, err
	}
	var out struct {
		IsPaused *bool `json:"is_paused"`
	}
	if err := d.doJSON(ctx, http.MethodGet, "/is_paused", nil, nil, &out, false); err != nil {
		return false, err
	}
	if out.IsPaused == nil {
		return false, d.shapeError("GET /is_paused", `answer lacks "is_paused"`)
	}
	return *out.IsPaused, nil
}

func (d *vllmDriver) ResetPrefixCache(ctx context.Context) error {
	return d.ResetPrefixCacheWith(ctx, ResetOptions{})
}

func (d *vllmDriver) Sleep(ctx context.Context, level int) error {
	if level != 1 && level != 2 {
		return fmt.Errorf("engine %s: sleep level %d (want 1 or 2)", d.url, level)
	}
	_, err := d.do(ctx, http.MethodPost, "/sleep", url.Values{"level": {strconv.Itoa(level)}}, nil, true)
	return err
}

func (d *vllmDriver) WakeUp(ctx context.Context) error {
	_, err := d.do(ctx, http.MethodPost, "/wake_up", nil, nil, true)
	return err
}

// CollectiveRPCRequest is the body of vLLM's POST /collective_rpc.
type CollectiveRPCRequest struct {
	Method  string            `json:"method"`
	Args    []string          `json:"args"`
	Kwargs  map[string]string `json:"kwargs"`
	Timeout *float64          `json:"timeout"`
}

// CollectiveRPCResponse is its answer: one result per worker (vLLM turns
// results that are not null, dicts or lists into strings).
type CollectiveRPCResponse struct {
	Results []json.RawMessage `json:"results"`
}

// rpc calls method on every worker and returns the per-worker results
// (nil when vLLM answered an empty 200, i.e. the call returned None).
func (d *vllmDriver) rpc(ctx context.Context, method string, args ...string) ([]json.RawMessage, error) {
	if args == nil {
		args = []string{}
	}
	req := CollectiveRPCRequest{Method: method, Args: args, Kwargs: map[string]string{}}
	data, err := d.do(ctx, http.MethodPost, "/collective_rpc", nil, req, true)
	if err != nil {
		return nil, err
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		return nil, nil
	}
	var out CollectiveRPCResponse
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, d.shapeError("POST /collective_rpc", "answer %.200q is not {\"results\": [...]}: %v", data, err)
	}
	return out.Results, nil
}

// rpcVersion calls a method whose per-worker result is a version and
// requires every worker to report the same one. ok is false when no worker
// reported one (an empty answer, or every result null: the method returned
// None).
func (d *vllmDriver) rpcVersion(ctx context.Context, method string, args ...string) (int64, bool, error) {
	results, err := d.rpc(ctx, method, args...)
	if err != nil {
		return 0, false, err
	}
	nulls := 0
	for _, r := range results {
		if strings.TrimSpace(string(r)) == "null" {
			nulls++
		}
	}
	if nulls == len(results) {
		return 0, false, nil
	}
	var v int64
	for i, r := range results {
		w, err := parseVersion(r)
		if err != nil {
			return 0, false, d.shapeError("POST /collective_rpc", "%s: worker %d answered %s: %v", method, i, r, err)
		}
		if i > 0 && w != v {
			return 0, false, d.shapeError("POST /collective_rpc", "%s: workers disagree: worker 0 reports version %d, worker %d reports %d", method, v, i, w)
		}
		v = w
	}
	return v, true, nil
}

// parseVersion reads a version from a JSON number, a numeric string (vLLM
// stringifies ints) or an object {"version": n}.
func parseVersion(r json.RawMessage) (int64, error) {
	var n int64
	if json.Unmarshal(r, &n) == nil {
		return n, nil
	}
	var s string
	if json.Unmarshal(r, &s) == nil {
		return strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	}
	var o struct {
		Version *int64 `json:"version"`
	}
	if json.Unmarshal(r, &o) == nil && o.Version != nil {
		return *o.Version, nil
	}
	return 0, fmt.Errorf("not a version")
}

// load runs a loading RPC, checks the workers' reported version (when they
// report one) and records the swap.
func (d *vllmDriver) load(ctx context.Context, method, dir string, version int64) error {
	if dir == "" {
		return fmt.Errorf("engine %s: %s: empty directory", d.url, method)
	}
	start := d.opts.Now()
	got, ok, err := d.rpcVersion(ctx, method, dir, strconv.FormatInt(version, 10))
	if err != nil {
		return err
	}
	if ok && got != version {
		return d.shapeError("POST /collective_rpc", "%s(%s, %d): workers report version %d", method, dir, version, got)
	}
	d.recordSwap(version, start, d.opts.Now())
	return nil
}

func (d *vllmDriver) LoadCheckpoint(ctx context.Context, dir string, version int64) error {
	return d.load(ctx, RPCLoadCheckpoint, dir, version)
}

func (d *vllmDriver) ApplyDelta(ctx context.Context, dir string, version int64) error {
	return d.load(ctx, RPCApplyDelta, dir, version)
}

func (d *vllmDriver) ServedVersion(ctx context.Context) (int64, error) {
	v, ok, err := d.rpcVersion(ctx, RPCLoadedVersion)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, d.shapeError("POST /collective_rpc", "%s returned no results (%s)", RPCLoadedVersion, HintExtension)
	}
	return v, nil
}

// LoadLoRARequest is the body of vLLM's POST /v1/load_lora_adapter.
type LoadLoRARequest struct {
	LoRAName    string `json:"lora_name"`
	LoRAPath    string `json:"lora_path"`
	LoadInplace bool   `json:"load_inplace"`
}

func (d *vllmDriver) LoadLoRA(ctx context.Context, name, path string) error {
	if name == "" || path == "" {
		return fmt.Errorf("engine %s: LoRA name and path are required", d.url)
	}
	_, err := d.do(ctx, http.MethodPost, "/v1/load_lora_adapter", nil, LoadLoRARequest{LoRAName: name, LoRAPath: path, LoadInplace: true}, true)
	var re *RouteError
	if errors.As(err, &re) && re.Status == http.StatusBadRequest && re.Hint == "" {
		// A release without load_inplace drops it and refuses a second
		// load under the same name.
		if c := d.cachedCaps(ctx); !c.Has(FeatureLoRAInplace) {
			re.Hint = fmt.Sprintf("%s cannot replace an adapter in place: upgrade to %s", c.Describe(), needVLLM(FeatureLoRAInplace))
		}
	}
	return err
}

func (d *vllmDriver) UnloadLoRA(ctx context.Context, name string) error {
	_, err := d.do(ctx, http.MethodPost, "/v1/unload_lora_adapter", nil, map[string]string{"lora_name": name}, false)
	return err
}

func (d *vllmDriver) Metrics(ctx context.Context) (Metrics, error) {
	return d.metrics(ctx, KindVLLM)
}

// vllmMetrics maps vLLM's metric names onto Metrics.
func vllmMetrics(raw map[string]float64) Metrics {
	m := Metrics{
		Running:       raw["vllm:num_requests_running"],
		Waiting:       raw["vllm:num_requests_waiting"],
		KVCacheUsage:  raw["vllm:kv_cache_usage_perc"],
		PrefixHits:    raw["vllm:prefix_cache_hits_total"],
		PrefixQueries: raw["vllm:prefix_cache_queries_total"],
		Raw:           raw,
	}
	if _, ok := raw["vllm:kv_cache_usage_perc"]; !ok {
		m.KVCacheUsage = raw["vllm:gpu_cache_usage_perc"] // vLLM before v0.10
	}
	if m.PrefixQueries > 0 {
		m.PrefixHitRate = m.PrefixHits / m.PrefixQueries
	}
	return m
}

// CompletionRequest is the token-in/token-out body the drivers send to
// /v1/completions (vLLM's CompletionRequest fields).
type CompletionRequest struct {
	Model                  string   `json:"model"`
	Prompt                 []int32  `json:"prompt"`
	MaxTokens              int      `json:"max_tokens"`
	Temperature            float64  `json:"temperature"`
	TopP                   *float64 `json:"top_p,omitempty"`
	TopK                   *int     `json:"top_k,omitempty"`
	Stop                   []string `json:"stop,omitempty"`
	Seed                   *int64   `json:"seed,omitempty"`
	Logprobs               int      `json:"logprobs"`
	ReturnTokenIDs         bool     `json:"return_token_ids"`
	ReturnTokensAsTokenIDs bool     `json:"return_tokens_as_token_ids"`
	RequestID              string   `json:"request_id,omitempty"`
}

// CompletionChoice is the part of a /v1/completions choice the drivers read.
type CompletionChoice struct {
	Index          int     `json:"index"`
	Text           string  `json:"text"`
	FinishReason   *string `json:"finish_reason"`
	TokenIDs       []int32 `json:"token_ids"`
	PromptTokenIDs []int32 `json:"prompt_token_ids"`
	Logprobs       *struct {
		Tokens        []string   `json:"tokens"`
		TokenLogprobs []*float32 `json:"token_logprobs"`
	} `json:"logprobs"`
	// TokenWeightVersions is the built-in engine's extension.
	TokenWeightVersions []int64 `json:"token_weight_versions"`
}

// CompletionResponse is the part of a /v1/completions answer the drivers read.
type CompletionResponse struct {
	Choices []CompletionChoice `json:"choices"`
}

func completionBody(model string, req GenerateRequest) (CompletionRequest, error) {
	if len(req.PromptIDs) == 0 {
		return CompletionRequest{}, fmt.Errorf("generate: empty prompt")
	}
	if req.MaxTokens < 1 {
		return CompletionRequest{}, fmt.Errorf("generate: max_tokens %d < 1", req.MaxTokens)
	}
	body := CompletionRequest{
		Model: model, Prompt: req.PromptIDs, MaxTokens: req.MaxTokens, Temperature: req.Temperature,
		Stop: req.Stop, Seed: req.Seed, Logprobs: 0, ReturnTokenIDs: true, ReturnTokensAsTokenIDs: true,
		RequestID: req.RequestID,
	}
	if req.TopP > 0 {
		tp := req.TopP
		body.TopP = &tp
	}
	if req.TopK > 0 {
		tk := req.TopK
		body.TopK = &tk
	}
	return body, nil
}

// resultFromChoice checks a choice's shape and converts it.
func (b *base) resultFromChoice(route string, c CompletionChoice) (GenerateResult, error) {
	res := GenerateResult{PromptIDs: c.PromptTokenIDs, TokenIDs: c.TokenIDs, TokenVersions: c.TokenWeightVersions}
	if c.FinishReason != nil {
		res.FinishReason = *c.FinishReason
	}
	if res.PromptIDs == nil {
		return res, b.shapeError(route, "choice lacks prompt_token_ids (return_token_ids: true was sent)")
	}
	if c.TokenIDs == nil {
		return res, b.shapeError(route, "choice lacks token_ids (return_token_ids: true was sent)")
	}
	if c.Logprobs == nil || len(c.Logprobs.TokenLogprobs) != len(c.TokenIDs) {
		n := -1
		if c.Logprobs != nil {
			n = len(c.Logprobs.TokenLogprobs)
		}
		return res, b.shapeError(route, "logprobs.token_logprobs has %d entries for %d tokens (logprobs: 0 was sent)", n, len(c.TokenIDs))
	}
	res.Logprobs = make([]float32, len(c.TokenIDs))
	for i, lp := range c.Logprobs.TokenLogprobs {
		if lp == nil {
			return res, b.shapeError(route, "logprobs.token_logprobs[%d] is null", i)
		}
		res.Logprobs[i] = *lp
	}
	if len(c.Logprobs.Tokens) == len(c.TokenIDs) {
		for i, tok := range c.Logprobs.Tokens {
			if want := "token_id:" + strconv.Itoa(int(c.TokenIDs[i])); tok != want {
				return res, b.shapeError(route, "logprobs.tokens[%d] = %q, want %q (return_tokens_as_token_ids: true was sent)", i, tok, want)
			}
		}
	}
	if res.TokenVersions != nil && len(res.TokenVersions) != len(res.TokenIDs) {
		return res, b.shapeError(route, "token_weight_versions has %d entries for %d tokens", len(res.TokenVersions), len(res.TokenIDs))
	}
	return res, nil
}

func (d *vllmDriver) Generate(ctx context.Context, req GenerateRequest) (GenerateResult, error) {
	model := req.Model
	if model == "" {
		var err error
		if model, err = d.servedModel(ctx); err != nil {
			return GenerateResult{}, err
		}
	}
	body, err := completionBody(model, req)
	if err != nil {
		return GenerateResult{}, fmt.Errorf("engine %s: %w", d.url, err)
	}
	start := d.opts.Now()
	var out CompletionResponse
	if err := d.doJSON(ctx, http.MethodPost, "/v1/completions", nil, body, &out, true); err != nil {
		return GenerateResult{}, err
	}
	end := d.opts.Now()
	if len(out.Choices) != 1 {
		return GenerateResult{}, d.shapeError("POST /v1/completions", "%d choices, want 1", len(out.Choices))
	}
	res, err := d.resultFromChoice("POST /v1/completions", out.Choices[0])
	res.Start, res.End = start, end
	return res, err
}
