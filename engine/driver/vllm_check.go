package driver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// kindFindings are vLLM's (and the built-in engine's) checks: dev routes,
// the run's pause mode on this release, token ids, the worker extension,
// LoRA in place, R3, the support sets' top-k against max_logprobs and the
// logprobs mode.
func (d *vllmDriver) kindFindings(ctx context.Context, c Capabilities, n Needs) []Finding {
	var out []Finding
	add := func(f *Finding) {
		if f != nil {
			out = append(out, *f)
		}
	}
	add(d.checkDevRoutes(ctx, c))
	add(checkPauseMode(c, n))
	add(checkKeepReset(c, n))
	if c.Known && !c.Has(FeatureTokenIDs) {
		add(&Finding{Check: "token ids (release)", Verdict: VerdictFail,
			Detail: fmt.Sprintf("%s answers no token_ids for return_token_ids", c.Describe()), Fix: "upgrade to " + needVLLM(FeatureTokenIDs)})
	}
	add(d.checkExtension(ctx, n))
	add(checkLoRAInplace(c, n))
	out = append(out, checkRoutes(c, n)...)
	add(d.checkSupportTopK(ctx, c, n))
	add(checkLogprobsMode(c, n))
	return out
}

// checkDevRoutes: /is_paused answers. On a release without the pause
// routes the fix is an upgrade, not dev mode (which is then on already
// or beside the point).
func (d *vllmDriver) checkDevRoutes(ctx context.Context, c Capabilities) *Finding {
	const check = "dev mode (RL routes)"
	if c.Known && !c.Has(FeaturePause) {
		return &Finding{Check: check, Verdict: VerdictFail,
			Detail: fmt.Sprintf("%s has no /pause, /resume, /is_paused (VLLM_SERVER_DEV_MODE does not add them)", c.Describe()),
			Fix:    "upgrade to " + needVLLM(FeaturePause)}
	}
	if _, err := d.IsPaused(ctx); err != nil {
		return &Finding{Check: check, Verdict: VerdictFail, Detail: errDetail(err), Fix: hintOr(err, HintDevMode)}
	}
	return &Finding{Check: check, Verdict: VerdictPass, Detail: "GET /is_paused answers (pause, resume, collective_rpc, sleep served)"}
}

// checkPauseMode grades the run's trainer.pause_mode on the release:
// what vllmPauseQuery would send, or refuse.
func checkPauseMode(c Capabilities, n Needs) *Finding {
	if n.PauseMode == "" || (c.Known && !c.Has(FeaturePause)) {
		return nil // no mode asked, or no /pause at all (the dev routes row fails)
	}
	check := "pause mode " + string(n.PauseMode)
	switch {
	case !c.Known && n.PauseMode == PauseKeep:
		return &Finding{Check: check, Verdict: VerdictWarn,
			Detail: "release unknown: keep swaps pause with abort (an engine that does not say its release is not trusted to drop the kept requests' KV: reset_running_requests would be dropped silently before vLLM " + MinRelease(VLLMFeatures, KindVLLM, FeatureResetRunning) + ")",
			Fix:    "a vLLM that answers GET /version, " + needVLLM(FeatureResetRunning) + " for keep"}
	case !c.Known:
		return &Finding{Check: check, Verdict: VerdictWarn,
			Detail: fmt.Sprintf("release unknown: /pause is assumed to take mode=%s (vLLM before %s drops it and aborts)", n.PauseMode, MinRelease(VLLMFeatures, KindVLLM, FeaturePauseModes)),
			Fix:    "a vLLM that answers GET /version, " + needVLLM(FeaturePauseModes) + " for keep"}
	case c.Has(FeaturePauseModes):
		return &Finding{Check: check, Verdict: VerdictPass, Detail: fmt.Sprintf("/pause?mode=%s", n.PauseMode)}
	}
	q, err := vllmPauseQuery("", c, n.PauseMode, true)
	if err != nil {
		return &Finding{Check: check, Verdict: VerdictFail,
			Detail: fmt.Sprintf("%s's /pause has no mode parameter: %s would run as abort", c.Describe(), n.PauseMode),
			Fix:    fmt.Sprintf("upgrade to %s, or set trainer.pause_mode: wait or abort", needVLLM(FeaturePauseModes))}
	}
	return &Finding{Check: check, Verdict: VerdictPass,
		Detail: fmt.Sprintf("%s has no mode parameter: sent as /pause?%s", c.Describe(), q.Encode())}
}

// checkKeepReset: after a keep swap the kept requests' KV and the prefix
// cache were computed by the old weights; dropping them while requests
// are held needs reset_running_requests. Without it the swap
// (cluster/weightsync Driven.swap, driver.ResetsRunning) pauses with abort
// instead, so keep costs what abort costs — what the finding says, not
// stale KV.
func checkKeepReset(c Capabilities, n Needs) *Finding {
	if n.PauseMode != PauseKeep || !c.Known || !c.Has(FeaturePauseModes) || c.Has(FeatureResetRunning) {
		return nil
	}
	return &Finding{Check: "prefix cache after keep", Verdict: VerdictWarn,
		Detail: fmt.Sprintf("%s cannot drop the kept requests' KV (no reset_running_requests): keep swaps pause with abort instead (/pause?mode=abort&clear_cache=true; the rollouts retry the aborted requests), so keep costs what abort costs", c.Describe()),
		Fix:    "upgrade to " + needVLLM(FeatureResetRunning) + ", or trainer.pause_mode: wait or abort"}
}

// checkExtension: asyncrl's worker extension answers, for the weight loads
// that go through it (full and delta; "" = not said, checked).
func (d *vllmDriver) checkExtension(ctx context.Context, n Needs) *Finding {
	const check = "asyncrl extension"
	if n.WeightLoad == "lora" {
		return &Finding{Check: check, Verdict: VerdictInfo, Detail: "weight_load lora: versions load as adapters, not through the extension"}
	}
	v, err := d.ServedVersion(ctx)
	if err != nil {
		return &Finding{Check: check, Verdict: VerdictFail, Detail: errDetail(err), Fix: hintOr(err, HintExtension)}
	}
	return &Finding{Check: check, Verdict: VerdictPass, Detail: fmt.Sprintf("collective_rpc %s → %d", RPCLoadedVersion, v)}
}

func checkLoRAInplace(c Capabilities, n Needs) *Finding {
	if !n.LoRA {
		return nil
	}
	const check = "LoRA in place"
	switch {
	case !c.Known:
		return &Finding{Check: check, Verdict: VerdictWarn, Detail: "release unknown: load_inplace assumed (older vLLM refuses a second load under the same name)",
			Fix: "a vLLM that answers GET /version, " + needVLLM(FeatureLoRAInplace)}
	case !c.Has(FeatureLoRAInplace):
		return &Finding{Check: check, Verdict: VerdictFail,
			Detail: fmt.Sprintf("%s drops load_inplace: the second version's adapter load is refused (400, already loaded)", c.Describe()),
			Fix:    "upgrade to " + needVLLM(FeatureLoRAInplace)}
	}
	return &Finding{Check: check, Verdict: VerdictPass, Detail: "load_lora_adapter takes load_inplace"}
}

// checkRoutes grades R3: routes on completions (release), the server flag
// (/server_info) and, for multi-turn episodes, the prompt start.
func checkRoutes(c Capabilities, n Needs) []Finding {
	if !n.Routes {
		return nil
	}
	const check = "routed experts (R3)"
	const fix = "start vLLM with --enable-return-routed-experts"
	var out []Finding
	flag, seen := c.Server[ServerReturnRoutedExperts]
	switch {
	case c.Known && !c.Has(FeatureRoutedExperts):
		out = append(out, Finding{Check: check, Verdict: VerdictFail,
			Detail: fmt.Sprintf("%s answers no routed_experts on /v1/completions", c.Describe()), Fix: "upgrade to " + needVLLM(FeatureRoutedExperts)})
	case seen && flag != "true":
		out = append(out, Finding{Check: check, Verdict: VerdictFail,
			Detail: "enable_return_routed_experts is " + flag + " (/server_info): answers carry no routes and every turn fails", Fix: fix})
	case !seen:
		out = append(out, Finding{Check: check, Verdict: VerdictWarn,
			Detail: "enable_return_routed_experts not visible (GET /server_info answers with VLLM_SERVER_DEV_MODE=1): assumed on", Fix: fix})
	case !c.Known:
		out = append(out, Finding{Check: check, Verdict: VerdictWarn,
			Detail: "release unknown: routed_experts on /v1/completions assumed", Fix: needVLLM(FeatureRoutedExperts)})
	default:
		out = append(out, Finding{Check: check, Verdict: VerdictPass, Detail: "enable_return_routed_experts on"})
	}
	if !n.MultiTurn {
		return out
	}
	const pcheck = "R3 prompt start"
	switch {
	case !c.Known:
		out = append(out, Finding{Check: pcheck, Verdict: VerdictWarn,
			Detail: "release unknown: routed_experts_prompt_start assumed; if dropped, rollouts slice the rows they hold client-side",
			Fix:    needVLLM(FeatureRoutesPromptStart)})
	case !c.Has(FeatureRoutesPromptStart):
		out = append(out, Finding{Check: pcheck, Verdict: VerdictWarn,
			Detail: fmt.Sprintf("%s drops routed_experts_prompt_start: every turn's answer carries the whole context's routes and the rollout client slices off the rows it holds", c.Describe()),
			Fix:    "upgrade to " + needVLLM(FeatureRoutesPromptStart)})
	default:
		out = append(out, Finding{Check: pcheck, Verdict: VerdictPass, Detail: "routed_experts_prompt_start honoured"})
	}
	return out
}

// vllmDefaultMaxLogprobs is vLLM's --max-logprobs default
// (vllm/config/model.py @0052a5b818980ce8a0477706aaf9f75bd5af72cd).
const vllmDefaultMaxLogprobs = 20

// checkSupportTopK: support_from_logprobs asks logprobs: k of every turn;
// vLLM answers 400 above --max-logprobs. The server's own figure decides
// where /server_info shows it; else a 1-token generation with logprobs: k
// does.
func (d *vllmDriver) checkSupportTopK(ctx context.Context, c Capabilities, n Needs) *Finding {
	k := n.SupportTopK
	if k <= 0 {
		return nil
	}
	const check = "support top-k"
	fix := fmt.Sprintf("start vLLM with --max-logprobs %d (default %d), or lower rollout.support_from_logprobs", k, vllmDefaultMaxLogprobs)
	if m, ok := c.ServerInt(ServerMaxLogprobs); ok {
		if m != -1 && m < k {
			return &Finding{Check: check, Verdict: VerdictFail,
				Detail: fmt.Sprintf("max_logprobs %d < support_from_logprobs %d: every turn is refused (400 \"Requested sample logprobs of %d, which is greater than max allowed: %d\")", m, k, k, m),
				Fix:    fix}
		}
		return &Finding{Check: check, Verdict: VerdictPass, Detail: fmt.Sprintf("max_logprobs %d >= %d", m, k)}
	}
	err := d.probeLogprobs(ctx, n.Model, k)
	var re *RouteError
	switch {
	case err == nil:
		return &Finding{Check: check, Verdict: VerdictPass, Detail: fmt.Sprintf("a generation with logprobs: %d answers", k)}
	case errors.As(err, &re) && re.Status == http.StatusBadRequest:
		return &Finding{Check: check, Verdict: VerdictFail, Detail: errDetail(err), Fix: fix}
	}
	return &Finding{Check: check, Verdict: VerdictWarn, Detail: errDetail(err), Fix: fix}
}

// probeLogprobs runs a 1-token generation asking k top logprobs.
func (d *vllmDriver) probeLogprobs(ctx context.Context, model string, k int) error {
	if model == "" {
		var err error
		if model, err = d.servedModel(ctx); err != nil {
			return err
		}
	}
	body, err := completionBody(model, GenerateRequest{PromptIDs: probePrompt(d.kind), MaxTokens: 1, Temperature: 1})
	if err != nil {
		return err
	}
	body.Logprobs = k
	_, err = d.do(ctx, http.MethodPost, "/v1/completions", nil, body, false)
	return err
}

// checkLogprobsMode: support sets rebuilt from top logprobs need the
// processed (filtered) distribution.
func checkLogprobsMode(c Capabilities, n Needs) *Finding {
	const check = "logprobs mode"
	const fix = "--logprobs-mode processed_logprobs"
	mode, seen := c.Server[ServerLogprobsMode]
	switch {
	case seen && mode == "processed_logprobs":
		return &Finding{Check: check, Verdict: VerdictPass, Detail: mode}
	case n.SupportTopK <= 0 && seen:
		return &Finding{Check: check, Verdict: VerdictInfo, Detail: mode + " (no support sets asked)", Fix: fix}
	case n.SupportTopK <= 0:
		return &Finding{Check: check, Verdict: VerdictInfo, Detail: "not visible without /server_info: start vLLM with the flag so logprobs are the sampled distribution's", Fix: fix}
	case seen:
		return &Finding{Check: check, Verdict: VerdictWarn,
			Detail: fmt.Sprintf("logprobs_mode %s: the support sets read from top logprobs are the unfiltered distribution's (top-k/top-p removals do not show as -9999)", mode), Fix: fix}
	}
	return &Finding{Check: check, Verdict: VerdictWarn, Detail: "logprobs_mode not visible (GET /server_info answers with VLLM_SERVER_DEV_MODE=1); vLLM's default raw_logprobs gives unfiltered support sets", Fix: fix}
}
