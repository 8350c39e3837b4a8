package driver

import (
	"context"
	"fmt"
	"net/http"
	"slices"
)

// SGLang's features whose presence depends on its release.
const (
	// FeatureSGLangPauseModes: /pause_generation reads {"mode": abort |
	// retract | in_place}, and /update_weights_from_disk honours
	// flush_cache and, while paused, loads without waiting for the
	// requests in flight. Without it a pause always aborts and a disk
	// update always flushes after waiting for every request.
	FeatureSGLangPauseModes Feature = "sglang_pause_modes"
	// FeatureSGLangCompletionsTokenIDs: /v1/completions returns
	// choices[].token_ids and prompt_token_ids with return_token_ids.
	FeatureSGLangCompletionsTokenIDs Feature = "sglang_completions_token_ids"
)

// SGLangFeatures is SGLang's feature table. The releases are the first
// tagged after each PR's merge; SGLang's tags are read from the release
// dates others recorded (aws/deep-learning-containers #6456: v0.5.16 on
// 2026-07-26; #6244: v0.5.13 on 2026-06-13), not from a changelog.
var SGLangFeatures = []FeatureRow{
	{Kind: KindSGLang, Feature: FeatureSGLangPauseModes, Since: MustRelease("0.5.6"),
		Source: "sgl-project/sglang PR #10071 (in-flight weight update: io_struct.PauseGenerationReqInput.mode, " +
			"UpdateWeightFromDiskReqInput.flush_cache, tokenizer_manager.update_weights_from_disk skipping the writer lock while paused; merged before 2025-11-27) " +
			"and its follow-up PR #14064 (2025-11-27: in-flight updates in event_loop_normal, weight_version recorded). Before them tokenizer_manager.pause_generation " +
			"took no body and ran abort_request(abort_all=True), and update_weights_from_disk always held model_update_lock.writer_lock",
		Note: "before it /pause_generation always aborts (keep would silently abort) and a disk update waits for every request in flight: keep is refused"},
	{Kind: KindSGLang, Feature: FeatureSGLangCompletionsTokenIDs, Since: MustRelease("0.5.17"),
		Source: "sgl-project/sglang PR #30917 (return_token_ids on /v1/completions, opened 2026-07-12; 0.5.17 is the first tag sure to hold it)",
		Note:   "before it /v1/completions returns text and text-keyed logprobs only; asyncrl's rollouts use native /generate on every release"},
}

// sglangServerKeys are the /get_server_info fields Capabilities keeps
// (server_args fields, python/sglang/srt/server_args.py, and "version",
// http_server.get_server_info,
// sgl-project/sglang@0025436eab0556737d615b36a4dd3e1e26e82f3d).
var sglangServerKeys = []string{"version", "served_model_name", "model_path", "enable_lora", "enable_metrics",
	"enable_return_routed_experts", "max_running_requests", "weight_version"}

// Capabilities reads GET /get_server_info (its "version" is
// sglang.__version__) and derives the features from SGLangFeatures; an
// engine whose route fails or names no parsable version answers
// UnknownCapabilities.
func (d *sglangDriver) Capabilities(ctx context.Context) (Capabilities, error) {
	var info map[string]any
	if err := d.doJSON(ctx, http.MethodGet, "/get_server_info", nil, nil, &info, false); err != nil {
		return UnknownCapabilities(KindSGLang), nil
	}
	v, _ := info["version"].(string)
	rel, err := ParseRelease(v)
	c := UnknownCapabilities(KindSGLang)
	if err == nil {
		c = CapabilitiesFor(KindSGLang, rel, SGLangFeatures)
	}
	c.Server = map[string]string{}
	for _, k := range sglangServerKeys {
		if x, ok := info[k]; ok && x != nil {
			c.Server[k] = fmt.Sprint(x)
		}
	}
	d.mu.Lock()
	d.caps, d.capsRead = c, true
	d.mu.Unlock()
	return c, nil
}

// capabilities is the first Capabilities read, cached: a release does not
// change under a running driver.
func (d *sglangDriver) capabilities(ctx context.Context) Capabilities {
	d.mu.Lock()
	c, ok := d.caps, d.capsRead
	d.mu.Unlock()
	if ok {
		return c
	}
	c, _ = d.Capabilities(ctx)
	return c
}

// minRelease names the first release with f.
func sglangMin(f Feature) string {
	r, _ := Row(SGLangFeatures, KindSGLang, f)
	return r.Since.String()
}

// kindFindings grades SGLang against a run's needs (Check appends them).
func (d *sglangDriver) kindFindings(ctx context.Context, c Capabilities, n Needs) []Finding {
	var out []Finding
	add := func(check string, v Verdict, detail, fix string) {
		out = append(out, Finding{Check: check, Verdict: v, Detail: detail, Fix: fix})
	}
	rel := "an unknown release"
	if c.Known {
		rel = "SGLang " + c.Release.String()
	}
	switch n.PauseMode {
	case PauseWait:
		add("pause_mode", VerdictFail, "SGLang has no wait pause (its modes are abort, retract and in_place)",
			"set trainer.pause_mode: abort (or keep, SGLang's in_place)")
	case PauseKeep:
		add("pause_mode", VerdictWarn, "SGLang cannot drop running requests' KV (it flushes only with an empty running batch) nor abort requests frozen in_place "+
			"(its paused scheduler runs no forward pass, where an abort takes effect), so a keep swap pauses SGLang with abort "+
			"(cluster/weightsync Driven.swap) rather than resume them, or serve new requests, on KV from the old weights — keep costs what abort costs",
			"set trainer.pause_mode: abort (the same swap)")
	case PauseAbort:
		add("pause_mode", VerdictPass, "abort: the driver waits until the aborted requests left the running batch (/flush_cache answers 200) before the disk update", "")
	}
	switch n.WeightLoad {
	case "":
		add("weight loading", VerdictInfo, "full checkpoints via /update_weights_from_disk; SkyRL deltas are not supported", "weight_load: full for SGLang engines")
	case "delta":
		add("weight_load", VerdictFail, "SGLang cannot apply a SkyRL delta in place", "set weight_load: full for SGLang engines")
	case "lora":
		n.LoRA = true
	}
	if n.LoRA && c.Server["enable_lora"] == "false" {
		add("lora", VerdictFail, "the server runs without --enable-lora", HintSGLangLoRA)
	}
	if n.Routes {
		add("routes", VerdictFail, "asyncrl's SGLang rollout path (native /generate) does not ask for routed experts yet",
			"run R3 (return_routed_experts) on vLLM engines")
	}
	if n.SupportTopK > 0 {
		add("support_from_logprobs", VerdictFail, "support sets are built from vLLM's processed logprobs (filtered candidates at -9999); SGLang's /generate has no such mode",
			"set rollout.support_from_logprobs: 0 for SGLang engines")
	}
	if c.Server["enable_metrics"] == "false" {
		add("metrics", VerdictWarn, "the server runs without --enable-metrics: the router's bounded_sticky policy gets no queue length or KV usage from it", HintSGLangMetrics)
	}
	tok := "has no token ids on /v1/completions (PR #30917, " + sglangMin(FeatureSGLangCompletionsTokenIDs) + ")"
	if c.Has(FeatureSGLangCompletionsTokenIDs) {
		tok = "returns token ids on /v1/completions"
	}
	add("completions_token_ids", VerdictInfo, rel+" "+tok+"; asyncrl's rollouts use native /generate (input_ids in, output_ids and output_token_logprobs out) on every release", "")
	return out
}

// Models lists the names the SGLang server answers to as its base model:
// what /v1/models lists now — after a disk update the checkpoint path, for
// the tokenizer manager sets served_model_name = model_path
// (tokenizer_manager._wait_for_model_update_from_disk,
// sgl-project/sglang@0025436eab0556737d615b36a4dd3e1e26e82f3d) — and the
// launch --served-model-name, which server_args keeps and
// /get_server_info reports. Neither /generate nor /v1/completions checks
// the name, so the run's engines.served_model_name stays valid after a
// swap; listing both keeps the preflight and `engines check` true to it.
func (d *sglangDriver) Models(ctx context.Context) ([]string, error) {
	names, err := d.base.Models(ctx)
	if err != nil {
		return nil, err
	}
	if launch := d.capabilities(ctx).Server["served_model_name"]; launch != "" && !slices.Contains(names, launch) {
		names = append(names, launch)
	}
	return names, nil
}

// isBaseName reports whether name is the base model (not a LoRA adapter
// to select with lora_path): the driver's configured name, the launch
// name, a checkpoint path it loaded, or a name /v1/models lists.
func (d *sglangDriver) isBaseName(ctx context.Context, name string) (bool, error) {
	d.mu.Lock()
	known := name == d.opts.Model || name == d.model || d.loaded[name]
	d.mu.Unlock()
	if known {
		return true, nil
	}
	names, err := d.Models(ctx)
	if err != nil {
		return false, err
	}
	if !slices.Contains(names, name) {
		return false, nil
	}
	d.mu.Lock()
	d.loaded[name] = true // known from now on: no lookup per generation
	d.mu.Unlock()
	return true, nil
}
