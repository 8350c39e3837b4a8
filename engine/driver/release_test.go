package driver_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/engine/driver"
	"github.com/asyncrl/asyncrl/engine/enginetest"
)

func releaseDriver(t *testing.T, f *enginetest.ReleaseFake) driver.Driver {
	t.Helper()
	d, err := driver.New(driver.KindVLLM, f.URL, driver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The vLLM driver on each release profile: the release is read from
// /version; every pause mode the release can do reaches it as that mode
// (wait emulated before modes existed), the one it cannot do is refused
// at the call naming the release that has it and never sent to become an
// abort; the prefix-cache reset of running requests, LoRA in place and a
// generation likewise.
func TestVLLMDriverOnEveryRelease(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"0.14", "0.16", "main"} {
		t.Run(name, func(t *testing.T) {
			f := enginetest.NewVLLMReleaseFake(name, enginetest.ReleaseOptions{FakeOptions: enginetest.FakeOptions{DevMode: true, LoRA: true, Extension: true}})
			defer f.Close()
			d := releaseDriver(t, f)
			c, err := d.Capabilities(ctx)
			if err != nil || !c.Known || c.Release.Raw != f.Release.Version {
				t.Fatalf("capabilities %+v, %v: want release %s", c, err, f.Release.Version)
			}
			if c.Server[driver.ServerMaxLogprobs] != "20" || c.Server[driver.ServerLogprobsMode] != "raw_logprobs" {
				t.Fatalf("server info %v", c.Server)
			}
			hasModes := c.Has(driver.FeaturePauseModes)
			want := []driver.PauseMode{driver.PauseAbort, driver.PauseWait}
			for _, m := range want {
				if err := d.Pause(ctx, m, true); err != nil {
					t.Fatalf("pause %s: %v", m, err)
				}
				if err := d.Resume(ctx); err != nil {
					t.Fatal(err)
				}
			}
			err = d.Pause(ctx, driver.PauseKeep, false)
			if hasModes {
				want = append(want, driver.PauseKeep)
				if err != nil {
					t.Fatalf("keep on %s: %v", name, err)
				}
			} else if !errors.Is(err, driver.ErrUnsupported) || !strings.Contains(err.Error(), "0.16.0") {
				t.Fatalf("keep on %s: err %v, want a refusal naming 0.16.0", name, err)
			}
			if got := f.Pauses(); !slices.Equal(got, want) {
				t.Fatalf("the release applied %v, want %v", got, want)
			}
			if dropped := f.Dropped(); len(dropped) > 0 {
				t.Fatalf("the release ignored %v of what the driver sent", dropped)
			}
			paused, err := d.IsPaused(ctx)
			if err != nil || paused != hasModes {
				t.Fatalf("is_paused %v, %v", paused, err)
			}

			err = driver.ResetPrefixCacheWith(ctx, d, driver.ResetOptions{Running: true})
			if c.Has(driver.FeatureResetRunning) {
				if err != nil || !slices.Equal(f.Resets(), []bool{true}) {
					t.Fatalf("reset running: %v, resets %v", err, f.Resets())
				}
			} else if !errors.Is(err, driver.ErrUnsupported) || !strings.Contains(err.Error(), "0.17.0") || len(f.Resets()) != 0 {
				t.Fatalf("reset running on %s: err %v (resets %v), want a refusal naming 0.17.0", name, err, f.Resets())
			}
			if err := d.ResetPrefixCache(ctx); err != nil {
				t.Fatal(err)
			}

			for i := range 2 {
				err := d.LoadLoRA(ctx, "policy", "/ckpt/lora")
				switch {
				case i == 0 || c.Has(driver.FeatureLoRAInplace):
					if err != nil {
						t.Fatalf("LoRA load %d: %v", i, err)
					}
				case err == nil || !strings.Contains(err.Error(), "0.15.0"):
					t.Fatalf("second LoRA load on %s: err %v, want the upgrade to 0.15.0 named", name, err)
				}
			}
			if _, err := d.Generate(ctx, driver.GenerateRequest{PromptIDs: []int32{1, 2, 3}, MaxTokens: 1, Temperature: 1}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// vLLM 0.11 has no pause routes: every pause-route call is refused naming
// 0.12.0 (not the dev-mode hint: the route does not exist), and nothing is
// sent.
func TestVLLMDriverRefusesPauseOn011(t *testing.T) {
	ctx := context.Background()
	f := enginetest.NewVLLMReleaseFake("0.11", enginetest.ReleaseOptions{FakeOptions: enginetest.FakeOptions{DevMode: true, Extension: true}})
	defer f.Close()
	d := releaseDriver(t, f)
	for _, m := range []driver.PauseMode{driver.PauseAbort, driver.PauseWait, driver.PauseKeep} {
		err := d.Pause(ctx, m, true)
		if !errors.Is(err, driver.ErrUnsupported) || !strings.Contains(err.Error(), "0.12.0") || strings.Contains(err.Error(), "VLLM_SERVER_DEV_MODE") {
			t.Fatalf("pause %s: %v", m, err)
		}
	}
	if _, err := d.IsPaused(ctx); !errors.Is(err, driver.ErrUnsupported) {
		t.Fatalf("is_paused: %v", err)
	}
	if len(f.Pauses()) != 0 {
		t.Fatal("a pause reached a release without /pause")
	}
}

// An engine without /version (the plain fixtures' fake) is trusted: the
// driver sends the mode as before and Check warns that it assumed it.
func TestUnknownReleaseIsTrustedAndWarned(t *testing.T) {
	ctx := context.Background()
	f := enginetest.NewFake(driver.KindVLLM, enginetest.FakeOptions{DevMode: true, Extension: true})
	defer f.Close()
	d, err := driver.New(driver.KindVLLM, f.URL, driver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := d.Capabilities(ctx)
	if err != nil || c.Known {
		t.Fatalf("%+v %v", c, err)
	}
	if err := d.Pause(ctx, driver.PauseKeep, false); err != nil {
		t.Fatal(err)
	}
	if call, _ := f.Last("/pause"); !strings.Contains(call.Query, "mode=keep") {
		t.Fatalf("pause query %q", call.Query)
	}
	fs := driver.Check(ctx, d, driver.Needs{PauseMode: driver.PauseKeep})
	for _, check := range []string{"release", "pause mode keep"} {
		if f := finding(t, fs, check); f.Verdict != driver.VerdictWarn {
			t.Errorf("%s: %+v, want WARN", check, f)
		}
	}
	if failed := driver.Failed(fs); len(failed) > 0 {
		t.Fatalf("failed: %+v", failed)
	}
}

func finding(t *testing.T, fs []driver.Finding, check string) driver.Finding {
	t.Helper()
	for _, f := range fs {
		if f.Check == check {
			return f
		}
	}
	t.Fatalf("no %q finding in %+v", check, fs)
	return driver.Finding{}
}

// Check fails exactly where a run would, one case per audit row the fakes
// reproduce; the fix names the release or flag.
func TestCheckFailsWhereARunWould(t *testing.T) {
	dev := enginetest.FakeOptions{DevMode: true, LoRA: true, Extension: true}
	cases := []struct {
		name    string
		release string
		opts    enginetest.ReleaseOptions
		needs   driver.Needs
		check   string
		verdict driver.Verdict
		fix     string // substring of the finding's fix
	}{
		{"keep on 0.14 (mode dropped, would abort)", "0.14", enginetest.ReleaseOptions{FakeOptions: dev}, driver.Needs{PauseMode: driver.PauseKeep}, "pause mode keep", driver.VerdictFail, "0.16.0"},
		{"wait on 0.14 (emulated)", "0.14", enginetest.ReleaseOptions{FakeOptions: dev}, driver.Needs{PauseMode: driver.PauseWait}, "pause mode wait", driver.VerdictPass, ""},
		{"keep on 0.16", "0.16", enginetest.ReleaseOptions{FakeOptions: dev}, driver.Needs{PauseMode: driver.PauseKeep}, "pause mode keep", driver.VerdictPass, ""},
		{"keep on 0.16: old-weight KV kept", "0.16", enginetest.ReleaseOptions{FakeOptions: dev}, driver.Needs{PauseMode: driver.PauseKeep}, "prefix cache after keep", driver.VerdictWarn, "0.17.0"},
		{"/pause on 0.11 (upgrade, not dev mode)", "0.11", enginetest.ReleaseOptions{FakeOptions: dev}, driver.Needs{PauseMode: driver.PauseAbort}, "dev mode (RL routes)", driver.VerdictFail, "vLLM >= 0.12.0"},
		{"dev mode off on 0.16", "0.16", enginetest.ReleaseOptions{FakeOptions: enginetest.FakeOptions{Extension: true}}, driver.Needs{}, "dev mode (RL routes)", driver.VerdictFail, "VLLM_SERVER_DEV_MODE=1"},
		{"LoRA in place on 0.14", "0.14", enginetest.ReleaseOptions{FakeOptions: dev}, driver.Needs{LoRA: true, WeightLoad: "lora"}, "LoRA in place", driver.VerdictFail, "0.15.0"},
		{"LoRA in place on 0.16", "0.16", enginetest.ReleaseOptions{FakeOptions: dev}, driver.Needs{LoRA: true, WeightLoad: "lora"}, "LoRA in place", driver.VerdictPass, ""},
		{"R3 before 0.22 (no routes on completions)", "0.16", enginetest.ReleaseOptions{FakeOptions: dev, ReturnRoutedExperts: true}, driver.Needs{Routes: true}, "routed experts (R3)", driver.VerdictFail, "0.22.0"},
		{"R3 without --enable-return-routed-experts", "main", enginetest.ReleaseOptions{FakeOptions: dev}, driver.Needs{Routes: true}, "routed experts (R3)", driver.VerdictFail, "--enable-return-routed-experts"},
		{"R3 multi-turn on main", "main", enginetest.ReleaseOptions{FakeOptions: dev, ReturnRoutedExperts: true}, driver.Needs{Routes: true, MultiTurn: true}, "R3 prompt start", driver.VerdictPass, ""},
		{"R3 multi-turn before #51906 (sliced client-side)", "0.16", enginetest.ReleaseOptions{FakeOptions: dev}, driver.Needs{Routes: true, MultiTurn: true}, "R3 prompt start", driver.VerdictWarn, "0.29.0"},
		{"support 32 with max_logprobs 20 (server_info)", "main", enginetest.ReleaseOptions{FakeOptions: dev}, driver.Needs{SupportTopK: 32}, "support top-k", driver.VerdictFail, "--max-logprobs 32"},
		{"support 32 with max_logprobs 20 (no dev mode: probed)", "main", enginetest.ReleaseOptions{FakeOptions: enginetest.FakeOptions{Extension: true}}, driver.Needs{SupportTopK: 32}, "support top-k", driver.VerdictFail, "--max-logprobs 32"},
		{"support 32 with --max-logprobs 64", "main", enginetest.ReleaseOptions{FakeOptions: dev, MaxLogprobs: 64}, driver.Needs{SupportTopK: 32}, "support top-k", driver.VerdictPass, ""},
		{"support sets from raw logprobs", "main", enginetest.ReleaseOptions{FakeOptions: dev}, driver.Needs{SupportTopK: 8}, "logprobs mode", driver.VerdictWarn, "--logprobs-mode processed_logprobs"},
		{"support sets from processed logprobs", "main", enginetest.ReleaseOptions{FakeOptions: dev, LogprobsMode: "processed_logprobs"}, driver.Needs{SupportTopK: 8}, "logprobs mode", driver.VerdictPass, ""},
		{"no worker extension for delta loads", "main", enginetest.ReleaseOptions{FakeOptions: enginetest.FakeOptions{DevMode: true}}, driver.Needs{WeightLoad: "delta"}, "asyncrl extension", driver.VerdictFail, "--worker-extension-cls"},
		{"no worker extension needed for LoRA loads", "main", enginetest.ReleaseOptions{FakeOptions: dev}, driver.Needs{WeightLoad: "lora"}, "asyncrl extension", driver.VerdictInfo, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := enginetest.NewVLLMReleaseFake(tc.release, tc.opts)
			defer f.Close()
			fs := driver.Check(context.Background(), releaseDriver(t, f), tc.needs)
			got := finding(t, fs, tc.check)
			if got.Verdict != tc.verdict || !strings.Contains(got.Fix, tc.fix) {
				t.Fatalf("%+v, want %s with a fix naming %q", got, tc.verdict, tc.fix)
			}
			if r := finding(t, fs, "release"); r.Verdict != driver.VerdictPass || !strings.Contains(r.Detail, f.Release.Version) {
				t.Fatalf("release: %+v, want %s", r, f.Release.Version)
			}
			// A run fails exactly when a FAIL finding is present.
			if tc.verdict == driver.VerdictFail && len(driver.Failed(fs)) == 0 {
				t.Fatal("Failed() lost the failure")
			}
		})
	}
}
