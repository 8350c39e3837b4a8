package driver

import (
	"strings"
	"testing"
)

// vLLM 0.22–0.28 return routes on completions but drop the prompt start:
// R3 passes, multi-turn R3 warns (the rollout client slices) naming the
// release with PR #51906.
func TestRoutesBetweenRoutedExpertsAndPromptStart(t *testing.T) {
	c := CapabilitiesFor(KindVLLM, MustRelease("0.27.1"), VLLMFeatures)
	c.Server = map[string]string{ServerReturnRoutedExperts: "true"}
	fs := checkRoutes(c, Needs{Routes: true, MultiTurn: true})
	if len(fs) != 2 || fs[0].Verdict != VerdictPass || fs[1].Verdict != VerdictWarn || !strings.Contains(fs[1].Fix, "0.29.0") || !strings.Contains(fs[1].Fix, "#51906") {
		t.Fatalf("%+v", fs)
	}
	if fs := checkRoutes(c, Needs{Routes: true}); len(fs) != 1 {
		t.Fatalf("single-turn R3 graded the prompt start: %+v", fs)
	}
}

// An unstamped built-in engine ("dev") has every feature; an unparseable
// vLLM version is unknown (trusted, warned).
func TestBuiltinDevBuildHasEveryFeature(t *testing.T) {
	c := CapabilitiesFor(KindBuiltin, Release{Raw: "dev"}, VLLMFeatures)
	for _, r := range VLLMFeatures {
		if r.Kind == KindVLLM && !c.Has(r.Feature) {
			t.Errorf("builtin dev lacks %s", r.Feature)
		}
	}
	if old := CapabilitiesFor(KindVLLM, MustRelease("0.10.1"), VLLMFeatures); old.Has(FeatureTokenIDs) || old.Has(FeaturePause) {
		t.Fatal("0.10.1 has features from 0.10.2 and 0.12.0")
	}
}

// /server_info's JSON config yields the model_config keys; a text config
// (config_format ignored) yields none, and numbers stay integers.
func TestParseServerInfo(t *testing.T) {
	got := parseServerInfo([]byte(`{"vllm_config": {"model_config": {"max_logprobs": 64, "logprobs_mode": "processed_logprobs", "enable_return_routed_experts": true, "model": "m"}}, "vllm_env": {}}`))
	if got[ServerMaxLogprobs] != "64" || got[ServerLogprobsMode] != "processed_logprobs" || got[ServerReturnRoutedExperts] != "true" || len(got) != 3 {
		t.Fatalf("%v", got)
	}
	if got := parseServerInfo([]byte(`{"vllm_config": "model='m', max_logprobs=20"}`)); len(got) != 0 {
		t.Fatalf("text config: %v", got)
	}
}

// On a vLLM with pause modes but no reset_running_requests a keep swap
// pauses with abort (weightsync's swap, driver.ResetsRunning): the finding
// must say so, not that tokens attend to old-weight KV, which the swap
// prevents.
func TestCheckKeepResetSaysTheSwapAborts(t *testing.T) {
	c := CapabilitiesFor(KindVLLM, MustRelease("0.16.0"), VLLMFeatures)
	f := checkKeepReset(c, Needs{PauseMode: PauseKeep})
	if f == nil || f.Verdict != VerdictWarn {
		t.Fatalf("finding %+v, want a WARN", f)
	}
	if !strings.Contains(f.Detail, "pause with abort") || strings.Contains(f.Detail, "may attend") {
		t.Fatalf("detail %q: want what the swap does (aborts the kept requests)", f.Detail)
	}
	if f := checkKeepReset(CapabilitiesFor(KindVLLM, MustRelease("0.17.0"), VLLMFeatures), Needs{PauseMode: PauseKeep}); f != nil {
		t.Fatalf("0.17 resets running requests: no finding wanted, got %+v", f)
	}
}
