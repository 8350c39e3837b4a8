package driver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// The features whose presence depends on the vLLM release (and on the
// built-in engine, which serves vLLM's routes and has all of them).
const (
	// FeatureTokenIDs: /v1/completions answers token_ids and
	// prompt_token_ids for return_token_ids: true.
	FeatureTokenIDs Feature = "return_token_ids"
	// FeaturePause: the dev-mode /pause, /resume and /is_paused routes.
	FeaturePause Feature = "pause"
	// FeaturePauseWait: /pause takes wait_for_inflight_requests (the
	// pre-mode way to let in-flight requests finish).
	FeaturePauseWait Feature = "pause_wait_for_inflight_requests"
	// FeaturePauseModes: /pause takes mode=abort|wait|keep.
	FeaturePauseModes Feature = "pause_modes"
	// FeatureResetRunning: /reset_prefix_cache takes
	// reset_running_requests (drops the KV of running requests too).
	FeatureResetRunning Feature = "reset_running_requests"
	// FeatureLoRAInplace: /v1/load_lora_adapter takes load_inplace
	// (replace an adapter under the same name).
	FeatureLoRAInplace Feature = "lora_load_inplace"
	// FeatureRoutedExperts: a /v1/completions choice carries
	// routed_experts (R3) when the server runs with
	// --enable-return-routed-experts.
	FeatureRoutedExperts Feature = "routed_experts"
	// FeatureRoutesPromptStart: /v1/completions takes
	// routed_experts_prompt_start (rows from that prompt position on).
	FeatureRoutesPromptStart Feature = "routed_experts_prompt_start"
)

// VLLMFeatures says from which vLLM release each feature exists, and that
// the built-in engine has every one (it serves the routes of vLLM's main
// branch; its rows start at 0.0.0 so an unstamped "dev" build has them).
//
// Where a PR could not be pinned to the release that first shipped it, the
// row names the later candidate (a refusal on a release that may have the
// feature costs an upgrade; trusting one that lacks it costs a silent
// wrong run). Facts read from vllm-project/vllm with the code index; the
// engine/enginetest/testdata/vllm-<release> fixtures cite the same files.
var VLLMFeatures = append([]FeatureRow{
	{Kind: KindVLLM, Feature: FeatureTokenIDs, Since: MustRelease("0.10.2"),
		Source: "CompletionRequest.return_token_ids (vllm/entrypoints/openai/completion/protocol.py @002032ee2b18e1f7bd924ec47b62504ba3866063 has it); first released in 0.10.2 (issue 30 audit; actors/rollout's error names it)",
		Note:   "older releases drop the field: no token_ids, every rollout turn fails; refused at start"},
	{Kind: KindVLLM, Feature: FeaturePause, Since: MustRelease("0.12.0"),
		Source: "PR #28037 (opened 2025-11-04) added POST /pause?wait_for_inflight_requests&clear_cache, /resume, /is_paused; 0.11.0 has none (vllm/entrypoints/openai/api_server.py of 0.11: dev routes are server_info, reset_prefix_cache, sleep, wake_up, collective_rpc). 0.11.1 (2025-11-18) may include it: not pinned, 0.12.0 taken",
		Note:   "without it weight swaps cannot pause: refused at start naming 0.12.0 (not the dev-mode hint: dev mode is on, the route does not exist)"},
	{Kind: KindVLLM, Feature: FeaturePauseWait, Since: MustRelease("0.12.0"),
		Source: "PR #28037: wait_for_inflight_requests query parameter (deprecated for mode=wait on main: vllm/entrypoints/serve/dev/rlhf/api_router.py @0100a2129224e729af1b3b8ed42a900cdfe9a452)",
		Note:   "pause mode wait is emulated with it on releases without modes"},
	{Kind: KindVLLM, Feature: FeaturePauseModes, Since: MustRelease("0.16.0"),
		Source: "PR #32351 (opened 2026-01-14, reviewed until 2026-01-29) added mode=abort|wait|keep (api_router.py @0100a2129224e729af1b3b8ed42a900cdfe9a452: mode: PauseMode = \"abort\"); issue 30 audit: 0.14 has /pause without mode. 0.15.x not pinned: 0.16.0 taken",
		Note:   "FastAPI drops an unknown query parameter, so keep would silently become abort: keep is refused (error names 0.16.0), wait is emulated with wait_for_inflight_requests, abort is sent without mode"},
	{Kind: KindVLLM, Feature: FeatureResetRunning, Since: MustRelease("0.17.0"),
		Source: "PR #34382 (2026-02-11, \"Reset running requests when clearing cache for pause/resume\"): POST /reset_prefix_cache?reset_running_requests (vllm/frontend/entrypoints/serve/dev/cache/api_router.py @055e47c28003156421365af985d676fc921cb075, answers {\"success\": bool}). 0.16.0 not pinned: 0.17.0 taken",
		Note:   "without it the reset cannot drop blocks held by running (kept) requests: ResetPrefixCacheWith(Running) is refused naming 0.17.0"},
	{Kind: KindVLLM, Feature: FeatureLoRAInplace, Since: MustRelease("0.15.0"),
		Source: "PR #31326 (opened 2025-12-25, \"allow inplace loading lora\"): LoadLoRAAdapterRequest.load_inplace. 0.14.0 not pinned: 0.15.0 taken",
		Note:   "older releases drop load_inplace and answer 400 to a second load under the same name: LoRA runs are refused at start"},
	{Kind: KindVLLM, Feature: FeatureRoutedExperts, Since: MustRelease("0.22.0"),
		Source: "PR #38939: CompletionResponseChoice.routed_experts (base64 .npy; protocol.py @002032ee2b18e1f7bd924ec47b62504ba3866063), first in 0.22.0 (AReaL PR #1389: \"vLLM version must be at least 0.22.0\"); engine-side capture PR #28284 (2025-11)",
		Note:   "older releases answer no routes: R3 runs are refused at start. The request flag return_routed_experts is SGLang's; vLLM returns routes whenever the server runs with --enable-return-routed-experts"},
	{Kind: KindVLLM, Feature: FeatureRoutesPromptStart, Since: MustRelease("0.29.0"),
		Source: "PR #51906 (opened 2026-08-12, \"Add routed-experts prompt offset\"): CompletionRequest.routed_experts_prompt_start (protocol.py @002032ee2b18e1f7bd924ec47b62504ba3866063). 0.27.1 was released 2026-08-13 without it; 0.28.0 (2026-08-26, 2cf0a6915ce544dc493a0990f2ea38d81601128a) not verified: 0.29.0 taken",
		Note:   "older releases drop the field and answer routes from position 0: the rollout client slices the rows it already holds (WARN: the prompt's rows travel again every turn)"},
}, builtinRows(FeatureTokenIDs, FeaturePause, FeaturePauseWait, FeaturePauseModes, FeatureResetRunning,
	FeatureLoRAInplace, FeatureRoutedExperts, FeatureRoutesPromptStart)...)

// builtinRows: the built-in engine has fs in every release.
func builtinRows(fs ...Feature) []FeatureRow {
	rows := make([]FeatureRow, len(fs))
	for i, f := range fs {
		rows[i] = FeatureRow{Kind: KindBuiltin, Feature: f, Since: MustRelease("0.0.0"),
			Source: "asyncrl engine/ (this repository: routes.go, http.go, api.go)",
			Note:   "the built-in engine serves vLLM main's routes"}
	}
	return rows
}

// PRs name the upstream change of each vLLM feature, for the messages that
// tell a user what to upgrade to.
var vllmPRs = map[Feature]string{
	FeatureTokenIDs: "return_token_ids", FeaturePause: "PR #28037", FeaturePauseWait: "PR #28037",
	FeaturePauseModes: "PR #32351", FeatureResetRunning: "PR #34382", FeatureLoRAInplace: "PR #31326",
	FeatureRoutedExperts: "PR #38939", FeatureRoutesPromptStart: "PR #51906",
}

// needVLLM is the "upgrade" text of a refusal: "vLLM >= 0.16.0 (PR #32351)".
func needVLLM(f Feature) string {
	return fmt.Sprintf("vLLM >= %s (%s)", MinRelease(VLLMFeatures, KindVLLM, f), vllmPRs[f])
}

// VersionResponse is GET /version's answer: vLLM's {"version": "0.14.1"}
// (vllm/entrypoints/serve/instrumentator/basic.py; the same route and
// shape in vllm/entrypoints/openai/api_server.py of every release the
// table names); the built-in engine answers asyncrl's release and
// "engine": "asyncrl".
type VersionResponse struct {
	Version string `json:"version"`
	Engine  string `json:"engine,omitempty"`
}

// Server keys Capabilities.Server holds for vLLM and the built-in engine:
// model_config fields of GET /server_info?config_format=json (dev mode
// only; vllm/entrypoints/serve/instrumentator/server_info.py
// @09cb327f1183534adbdf9eee3e438688e75fbe2b; field defaults in
// vllm/config/model.py @0052a5b818980ce8a0477706aaf9f75bd5af72cd:
// max_logprobs 20, -1 = no cap; logprobs_mode raw_logprobs).
const (
	ServerMaxLogprobs         = "max_logprobs"
	ServerLogprobsMode        = "logprobs_mode"
	ServerReturnRoutedExperts = "enable_return_routed_experts"
	ServerSleepMode           = "enable_sleep_mode"
)

var serverKeys = []string{ServerMaxLogprobs, ServerLogprobsMode, ServerReturnRoutedExperts, ServerSleepMode}

// Capabilities reads GET /version (and GET /server_info?config_format=json
// where dev mode serves it) and derives the features from VLLMFeatures; it
// remembers the answer for Pause, ResetPrefixCacheWith and LoadLoRA.
func (d *vllmDriver) Capabilities(ctx context.Context) (Capabilities, error) {
	c, err := d.probe(ctx)
	if err != nil {
		return c, err
	}
	d.capsMu.Lock()
	d.caps = &c
	d.capsMu.Unlock()
	return c, nil
}

// cachedCaps is the remembered capabilities, probed on first use. A probe
// that fails (engine unreachable) is not remembered: the call that needed
// it then proceeds as on an unknown release and fails on its own route.
func (d *vllmDriver) cachedCaps(ctx context.Context) Capabilities {
	d.capsMu.Lock()
	c := d.caps
	d.capsMu.Unlock()
	if c != nil {
		return *c
	}
	got, err := d.Capabilities(ctx)
	if err != nil {
		return UnknownCapabilities(d.kind)
	}
	return got
}

func (d *vllmDriver) probe(ctx context.Context) (Capabilities, error) {
	var v VersionResponse
	err := d.doJSON(ctx, http.MethodGet, "/version", nil, nil, &v, false)
	var re *RouteError
	var c Capabilities
	switch {
	case err == nil && strings.TrimSpace(v.Version) != "":
		rel, perr := ParseRelease(v.Version)
		switch {
		case d.kind == KindBuiltin || v.Engine == "asyncrl":
			// An asyncrl engine — also one driven as kind vllm — has every
			// feature of its own source, whatever its release number (an
			// unstamped build says "dev"; asyncrl's numbers are not vLLM's).
			rel.Raw = v.Version
			c = CapabilitiesFor(KindBuiltin, rel, VLLMFeatures)
			c.Kind = d.kind
		case perr == nil:
			c = CapabilitiesFor(d.kind, rel, VLLMFeatures)
		default:
			c = UnknownCapabilities(d.kind)
			c.Release.Raw = v.Version
		}
	case err == nil, errors.As(err, &re) && (re.Status == http.StatusNotFound || re.Status == http.StatusOK):
		// No version route, or an answer without one: unknown, trusted.
		c = UnknownCapabilities(d.kind)
	default:
		return UnknownCapabilities(d.kind), err
	}
	c.Server = d.serverInfo(ctx)
	return c, nil
}

// serverInfo reads the model_config fields of /server_info; nil when the
// route is not served (dev mode off) or answers no JSON config.
func (d *vllmDriver) serverInfo(ctx context.Context) map[string]string {
	data, err := d.do(ctx, http.MethodGet, "/server_info", url.Values{"config_format": {"json"}}, nil, false)
	if err != nil {
		return nil
	}
	return parseServerInfo(data)
}

// parseServerInfo picks serverKeys out of vllm_config.model_config. A text
// vllm_config (a server that ignored config_format) yields an empty map.
func parseServerInfo(data []byte) map[string]string {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var si struct {
		VLLMConfig json.RawMessage `json:"vllm_config"`
	}
	if dec.Decode(&si) != nil {
		return nil
	}
	out := map[string]string{}
	var cfg struct {
		ModelConfig map[string]any `json:"model_config"`
	}
	dec = json.NewDecoder(bytes.NewReader(si.VLLMConfig))
	dec.UseNumber()
	if dec.Decode(&cfg) != nil {
		return out
	}
	for _, k := range serverKeys {
		if v, ok := cfg.ModelConfig[k]; ok && v != nil {
			out[k] = fmt.Sprint(v)
		}
	}
	return out
}

// vllmPauseQuery is the /pause query for mode on a release with c: the
// mode parameter where the release has modes; before that abort is the
// route's default and wait is wait_for_inflight_requests, while keep
// cannot be had (the release would drop mode and abort) and is refused
// naming the release that has it.
func vllmPauseQuery(engine string, c Capabilities, mode PauseMode, clearCache bool) (url.Values, error) {
	if !c.Has(FeaturePause) {
		return nil, &UnsupportedError{Engine: engine, Kind: c.Kind, Op: "POST /pause",
			Hint: fmt.Sprintf("%s has no /pause: upgrade to %s", c.Describe(), needVLLM(FeaturePause))}
	}
	clear := url.Values{"clear_cache": {fmt.Sprint(clearCache)}}
	if c.Has(FeaturePauseModes) {
		clear.Set("mode", string(mode))
		return clear, nil
	}
	switch mode {
	case PauseAbort:
		return clear, nil
	case PauseWait:
		clear.Set("wait_for_inflight_requests", "true")
		return clear, nil
	}
	return nil, &UnsupportedError{Engine: engine, Kind: c.Kind, Op: "pause mode " + string(mode),
		Hint: fmt.Sprintf("%s's /pause has no mode and would abort in-flight requests instead: upgrade to %s, or set trainer.pause_mode: wait or abort",
			c.Describe(), needVLLM(FeaturePauseModes))}
}

// noPauseRoute is the error of /resume and /is_paused on a release without
// them, or nil.
func (d *vllmDriver) noPauseRoute(ctx context.Context, route string) error {
	if c := d.cachedCaps(ctx); !c.Has(FeaturePause) {
		return &UnsupportedError{Engine: d.url, Kind: d.kind, Op: route,
			Hint: fmt.Sprintf("%s has no pause routes: upgrade to %s", c.Describe(), needVLLM(FeaturePause))}
	}
	return nil
}

// ResetOptions shape a prefix-cache reset.
type ResetOptions struct {
	// Running also drops the KV blocks held by running (and paused-kept)
	// requests, which then recompute them (vLLM reset_running_requests):
	// a reset without it cannot free blocks a running request holds. It
	// is the step a keep-mode swap takes before Resume
	// (cluster/weightsync): vLLM's scheduler "will only reset the KV
	// prefix cache when there is no running requests taking KV cache"
	// unless reset_running_requests, which preempts every running request
	// back to the waiting queue with no computed tokens
	// (vllm/v1/core/sched/scheduler.py@00024d314514900f361ad072af6931e403b7f589,
	// Scheduler.reset_prefix_cache; the route:
	// vllm/entrypoints/serve/cache/api_router.py@09cb327f1183534adbdf9eee3e438688e75fbe2b).
	// SGLang cannot: it flushes only an idle engine.
	Running bool
}

// PrefixCacheResetter is a driver whose engine resets the prefix cache
// with options (vLLM and the built-in engine).
type PrefixCacheResetter interface {
	ResetPrefixCacheWith(ctx context.Context, o ResetOptions) error
}

// ResetsRunning reports whether d can drop running requests' KV
// (ResetOptions.Running) on its engine's release: vLLM from 0.17.0, the
// built-in engine; never SGLang. An engine that does not say its release
// is not trusted here: a release without the parameter answers the reset
// 200 all the same (FastAPI drops it) and would leave old-weight blocks in
// use. A keep-mode swap on an engine that cannot pauses with abort instead.
func ResetsRunning(ctx context.Context, d Driver) bool {
	r, ok := d.(PrefixCacheResetter)
	if !ok {
		return false
	}
	if v, ok := r.(*vllmDriver); ok {
		c := v.cachedCaps(ctx)
		return c.Known && c.Has(FeatureResetRunning)
	}
	return true
}

// ResetPrefixCacheWith resets d's prefix cache with o: through
// PrefixCacheResetter where d has it, else d.ResetPrefixCache when o asks
// for nothing more; an ErrUnsupported error when it does.
func ResetPrefixCacheWith(ctx context.Context, d Driver, o ResetOptions) error {
	if r, ok := d.(PrefixCacheResetter); ok {
		return r.ResetPrefixCacheWith(ctx, o)
	}
	if o.Running {
		return &UnsupportedError{Engine: d.URL(), Kind: d.Kind(), Op: "prefix-cache reset of running requests"}
	}
	return d.ResetPrefixCache(ctx)
}

// ResetPrefixCacheWith is POST /reset_prefix_cache, with
// reset_running_requests=true for o.Running (refused naming the release
// on one without it). A {"success": false} answer (blocks still held) is
// an error: nothing was reset.
func (d *vllmDriver) ResetPrefixCacheWith(ctx context.Context, o ResetOptions) error {
	var q url.Values
	if o.Running {
		if c := d.cachedCaps(ctx); !c.Has(FeatureResetRunning) {
			return &UnsupportedError{Engine: d.url, Kind: d.kind, Op: "POST /reset_prefix_cache?reset_running_requests=true",
				Hint: fmt.Sprintf("%s would drop the parameter and keep the running requests' blocks: upgrade to %s", c.Describe(), needVLLM(FeatureResetRunning))}
		}
		q = url.Values{"reset_running_requests": {"true"}}
	}
	data, err := d.do(ctx, http.MethodPost, "/reset_prefix_cache", q, nil, false)
	if err != nil {
		return err
	}
	var out struct {
		Success *bool `json:"success"`
	}
	if json.Unmarshal(data, &out) == nil && out.Success != nil && !*out.Success {
		hint := "blocks are still held (running requests or KV offloads): retry"
		if !o.Running {
			hint = "running requests hold blocks: reset with reset_running_requests (ResetOptions.Running)"
		}
		return &RouteError{Engine: d.url, Route: "POST /reset_prefix_cache", Status: http.StatusOK,
			Message: `the engine answered {"success": false}: nothing was reset`, Hint: hint}
	}
	return nil
}
