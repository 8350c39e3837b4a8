package enginetest

import (
	"slices"
	"testing"

	"github.com/asyncrl/asyncrl/engine/driver"
)

// Every release profile cites its facts, and driver.VLLMFeatures says of
// its version exactly what the profile shows the release doing: the
// capability table and the conformance fixtures cannot drift apart.
func TestVLLMReleaseProfilesAgreeWithTheFeatureTable(t *testing.T) {
	for _, name := range VLLMReleaseNames {
		rel, err := LoadVLLMRelease(name)
		if err != nil {
			t.Fatal(err)
		}
		if len(rel.Sources) == 0 {
			t.Errorf("%s: no sources", name)
		}
		for i, s := range rel.Sources {
			if s.Repo == "" || s.Path == "" || s.Fact == "" {
				t.Errorf("%s: source %d lacks repo, path or fact: %+v", name, i, s)
			}
		}
		v, err := driver.ParseRelease(rel.Version)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		c := driver.CapabilitiesFor(driver.KindVLLM, v, driver.VLLMFeatures)
		shown := map[driver.Feature]bool{
			driver.FeatureTokenIDs:          slices.Contains(rel.CompletionFields, "return_token_ids"),
			driver.FeaturePause:             rel.Pause.Exists,
			driver.FeaturePauseWait:         slices.Contains(rel.Pause.Query, "wait_for_inflight_requests"),
			driver.FeaturePauseModes:        rel.Pause.Modes && slices.Contains(rel.Pause.Query, "mode"),
			driver.FeatureResetRunning:      slices.Contains(rel.ResetPrefixCache.Query, "reset_running_requests"),
			driver.FeatureLoRAInplace:       slices.Contains(rel.LoRALoadFields, "load_inplace"),
			driver.FeatureRoutedExperts:     rel.ChoiceRoutedExperts,
			driver.FeatureRoutesPromptStart: slices.Contains(rel.CompletionFields, "routed_experts_prompt_start"),
		}
		for f, want := range shown {
			if c.Has(f) != want {
				t.Errorf("vLLM %s (%s): the table says %s=%v, the profile shows %v", name, rel.Version, f, c.Has(f), want)
			}
		}
	}
	// Every feature the table has a vLLM row for is covered above, and
	// every row cites a source and says what happens without it.
	for _, r := range driver.VLLMFeatures {
		if r.Source == "" || r.Note == "" {
			t.Errorf("%s/%s: row without source or note", r.Kind, r.Feature)
		}
	}
}
