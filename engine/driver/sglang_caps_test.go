package driver

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// sglangInfoServer is tested through enginetest's fake in driver_test;
// here the table and the findings are checked on their own.
func TestSGLangFeatureTable(t *testing.T) {
	old := CapabilitiesFor(KindSGLang, MustRelease("0.5.5"), SGLangFeatures)
	if old.Has(FeatureSGLangPauseModes) || old.Has(FeatureSGLangCompletionsTokenIDs) {
		t.Fatalf("0.5.5: %+v", old)
	}
	mid := CapabilitiesFor(KindSGLang, MustRelease("0.5.16"), SGLangFeatures)
	if !mid.Has(FeatureSGLangPauseModes) || mid.Has(FeatureSGLangCompletionsTokenIDs) {
		t.Fatalf("0.5.16: %+v", mid)
	}
	for _, r := range SGLangFeatures {
		if r.Source == "" || r.Note == "" || r.Kind != KindSGLang {
			t.Errorf("row %s lacks its source or note", r.Feature)
		}
	}
}

func findingOf(fs []Finding, check string) (Finding, bool) {
	for _, f := range fs {
		if f.Check == check {
			return f, true
		}
	}
	return Finding{}, false
}

// kindFindings fails exactly where a run on SGLang would: wait pauses,
// keep before pause modes (naming the minimum release), deltas, routes,
// LoRA on a server without --enable-lora; it warns on keep's old-weight KV
// and on missing metrics.
func TestSGLangKindFindings(t *testing.T) {
	d := &sglangDriver{}
	ctx := context.Background()
	newCaps := CapabilitiesFor(KindSGLang, MustRelease("0.5.20"), SGLangFeatures)
	newCaps.Server = map[string]string{"enable_lora": "false", "enable_metrics": "false"}
	oldCaps := CapabilitiesFor(KindSGLang, MustRelease("0.5.5"), SGLangFeatures)
	cases := []struct {
		caps    Capabilities
		needs   Needs
		check   string
		verdict Verdict
		fix     string
	}{
		{newCaps, Needs{PauseMode: PauseWait}, "pause_mode", VerdictFail, "pause_mode: abort"},
		{oldCaps, Needs{PauseMode: PauseKeep}, "pause_mode", VerdictWarn, "abort"},
		{newCaps, Needs{PauseMode: PauseKeep}, "pause_mode", VerdictWarn, "abort"},
		{oldCaps, Needs{PauseMode: PauseAbort}, "pause_mode", VerdictPass, ""},
		{newCaps, Needs{WeightLoad: "delta"}, "weight_load", VerdictFail, "weight_load: full"},
		{newCaps, Needs{WeightLoad: "lora"}, "lora", VerdictFail, "--enable-lora"},
		{newCaps, Needs{Routes: true}, "routes", VerdictFail, "vLLM"},
		{newCaps, Needs{SupportTopK: 8}, "support_from_logprobs", VerdictFail, "support_from_logprobs: 0"},
		{newCaps, Needs{}, "metrics", VerdictWarn, "--enable-metrics"},
		{oldCaps, Needs{}, "completions_token_ids", VerdictInfo, ""},
	}
	for _, tc := range cases {
		f, ok := findingOf(d.kindFindings(ctx, tc.caps, tc.needs), tc.check)
		if !ok || f.Verdict != tc.verdict || !strings.Contains(f.Fix, tc.fix) {
			t.Errorf("%+v on %s: %+v (found %v), want %s with fix %q", tc.needs, tc.caps.Release, f, ok, tc.verdict, tc.fix)
		}
	}
	// Nothing fails for a plain abort run on a capable server.
	good := CapabilitiesFor(KindSGLang, MustRelease("0.5.20"), SGLangFeatures)
	for _, f := range d.kindFindings(ctx, good, Needs{PauseMode: PauseAbort, WeightLoad: "full"}) {
		if f.Verdict == VerdictFail {
			t.Errorf("abort/full failed: %+v", f)
		}
	}
	if !slices.ContainsFunc(d.kindFindings(ctx, oldCaps, Needs{}), func(f Finding) bool {
		return f.Check == "completions_token_ids" && strings.Contains(f.Detail, "no token ids")
	}) {
		t.Error("0.5.5's completions finding does not say it lacks token ids")
	}
}
