package main

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/engine/driver"
	"github.com/asyncrl/asyncrl/engine/enginetest"
)

// rowOf returns the table line of one check.
func rowOf(t *testing.T, out, check string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), check) {
			return l
		}
	}
	t.Fatalf("no %q row in:\n%s", check, out)
	return ""
}

// The built-in engine passes every check.
func TestEnginesCheckBuiltin(t *testing.T) {
	cfg := engine.DefaultConfig()
	cfg.TimeScale = 0
	e, err := engine.New(cfg, engine.NewHashModel(1))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	defer func() { e.Close(); srv.Close() }()
	code, out, errOut := cli(t, "engines", "check", "--kind", "builtin", "--require-lora", srv.URL)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, check := range []string{"health", "release", "served model", "dev mode", "token ids and logprobs", "asyncrl extension", "runtime LoRA", "LoRA in place", "logprobs mode", "metrics"} {
		if l := rowOf(t, out, check); !strings.Contains(l, "PASS") {
			t.Errorf("%s: %s", check, l)
		}
	}
	if !strings.Contains(rowOf(t, out, "served model"), cfg.ServedModelName) {
		t.Errorf("served model row lacks %q", cfg.ServedModelName)
	}
}

// A vLLM without VLLM_SERVER_DEV_MODE=1 fails, and the table says which
// variable fixes it.
func TestEnginesCheckDevModeOff(t *testing.T) {
	f := enginetest.NewFake(driver.KindVLLM, enginetest.FakeOptions{LoRA: true, Extension: true})
	defer f.Close()
	code, out, errOut := cli(t, "engines", "check", "--kind", "vllm", f.URL)
	t.Log("\n" + out)
	if code != 1 || !strings.Contains(errOut, "failed") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, check := range []string{"dev mode", "asyncrl extension"} {
		if l := rowOf(t, out, check); !strings.Contains(l, "FAIL") || !strings.Contains(l, "VLLM_SERVER_DEV_MODE=1") {
			t.Errorf("%s: %s", check, l)
		}
	}
	for _, check := range []string{"health", "token ids and logprobs", "runtime LoRA", "metrics"} {
		if l := rowOf(t, out, check); !strings.Contains(l, "PASS") {
			t.Errorf("%s: %s", check, l)
		}
	}
}

// Dev mode on but no worker extension: the extension row fails with the
// --worker-extension-cls fix; LoRA off only warns unless required.
func TestEnginesCheckExtensionAndLoRA(t *testing.T) {
	f := enginetest.NewFake(driver.KindVLLM, enginetest.FakeOptions{DevMode: true})
	defer f.Close()
	code, out, _ := cli(t, "engines", "check", "--kind", "vllm", f.URL)
	if code != 1 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	if l := rowOf(t, out, "asyncrl extension"); !strings.Contains(l, "FAIL") || !strings.Contains(l, "--worker-extension-cls asyncrl_vllm.WorkerExtension") {
		t.Errorf("extension: %s", l)
	}
	if l := rowOf(t, out, "runtime LoRA"); !strings.Contains(l, "WARN") || !strings.Contains(l, "VLLM_ALLOW_RUNTIME_LORA_UPDATING=1") {
		t.Errorf("lora: %s", l)
	}
	f2 := enginetest.NewFake(driver.KindVLLM, enginetest.FakeOptions{DevMode: true, Extension: true})
	defer f2.Close()
	if code, out, _ := cli(t, "engines", "check", "--kind", "vllm", f2.URL); code != 0 {
		t.Fatalf("LoRA off without --require-lora: exit %d\n%s", code, out)
	}
	if code, out, _ := cli(t, "engines", "check", "--kind", "vllm", "--require-lora", f2.URL); code != 1 || !strings.Contains(rowOf(t, out, "runtime LoRA"), "FAIL") {
		t.Fatalf("LoRA off with --require-lora: exit %d\n%s", code, out)
	}
	if code, _, errOut := cli(t, "engines", "check", "--kind", "tgi", f2.URL); code != 1 || !strings.Contains(errOut, "--kind") {
		t.Fatalf("bad kind: %d %q", code, errOut)
	}
}

func TestEnginesCheckSGLang(t *testing.T) {
	f := enginetest.NewFake(driver.KindSGLang, enginetest.FakeOptions{LoRA: true})
	defer f.Close()
	code, out, errOut := cli(t, "engines", "check", "--kind", "sglang", f.URL)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if l := rowOf(t, out, "weight loading"); !strings.Contains(l, "weight_load: full") {
		t.Errorf("weight loading: %s", l)
	}
}

// --config checks the run's engines.external against what that run asks:
// the same vLLM 0.14 engine fails under pause_mode keep (its /pause has no
// mode and would abort) and passes under wait (emulated), as the run's
// preflight would decide.
func TestEnginesCheckConfigPauseMode(t *testing.T) {
	f := enginetest.NewVLLMReleaseFake("0.14", enginetest.ReleaseOptions{FakeOptions: enginetest.FakeOptions{DevMode: true, Extension: true}})
	defer f.Close()
	write := func(mode string) string {
		p := filepath.Join(t.TempDir(), "run.yaml")
		y := fmt.Sprintf("engines:\n  served_model_name: Qwen/Qwen3-0.6B\n  external:\n    - {url: %q, kind: vllm}\ntrainer:\n  pause_mode: %s\n", f.URL, mode)
		if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	code, out, errOut := cli(t, "engines", "check", "--config", write("keep"))
	t.Log("\n" + out)
	if code != 1 || !strings.Contains(errOut, "failed") {
		t.Fatalf("keep on 0.14: exit %d, stderr %q", code, errOut)
	}
	if l := rowOf(t, out, "pause mode keep"); !strings.Contains(l, "FAIL") || !strings.Contains(l, "vLLM >= 0.16.0") {
		t.Errorf("pause mode: %s", l)
	}
	if l := rowOf(t, out, "release"); !strings.Contains(l, "0.14.1") {
		t.Errorf("release: %s", l)
	}
	if code, out, errOut := cli(t, "engines", "check", "--config", write("wait")); code != 0 {
		t.Fatalf("wait on 0.14: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, _, errOut := cli(t, "engines", "check", "--config", write("wait"), f.URL); code != 1 || !strings.Contains(errOut, "no URLs") {
		t.Fatalf("--config with URLs: exit %d, %q", code, errOut)
	}
	// The flags --config replaces are refused, not silently ignored (a
	// --model that was never checked would read as checked).
	if code, _, errOut := cli(t, "engines", "check", "--config", write("wait"), "--model", "other"); code != 1 || !strings.Contains(errOut, "--model") {
		t.Fatalf("--config with --model: exit %d, %q", code, errOut)
	}
}

// A config whose engines mix SGLang with vLLM-protocol engines is refused
// at the run's start (rollouthost.Protocol: the router sends any turn to
// any replica); --config fails on it too, naming the mix, before probing.
func TestEnginesCheckConfigRefusesAProtocolMix(t *testing.T) {
	sg := enginetest.NewFake(driver.KindSGLang, enginetest.FakeOptions{})
	defer sg.Close()
	p := filepath.Join(t.TempDir(), "run.yaml")
	y := fmt.Sprintf("engines:\n  served_model_name: Qwen/Qwen3-0.6B\n  count: 1\n  external:\n    - {url: %q, kind: sglang}\ntrainer:\n  pause_mode: abort\n", sg.URL)
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := cli(t, "engines", "check", "--config", p)
	if code != 1 || !strings.Contains(errOut, "SGLang") {
		t.Fatalf("exit %d, stderr %q, stdout:\n%s", code, errOut, out)
	}
}
