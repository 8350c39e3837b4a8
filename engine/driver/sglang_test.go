package driver_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/engine/driver"
	"github.com/asyncrl/asyncrl/engine/enginetest"
)

// Capabilities read the release and the server's own settings from
// /get_server_info; an engine without the route is unknown, not an error.
func TestSGLangCapabilities(t *testing.T) {
	f := enginetest.NewFake(driver.KindSGLang, enginetest.FakeOptions{SGLangRelease: "0.5.5", LoRA: true})
	defer f.Close()
	c, err := newDriver(t, driver.KindSGLang, f.URL).Capabilities(ctx)
	if err != nil || !c.Known || c.Release.String() != "0.5.5" || c.Has(driver.FeatureSGLangPauseModes) ||
		c.Server["served_model_name"] != "Qwen/Qwen3-0.6B" || c.Server["enable_lora"] != "true" {
		t.Fatalf("%+v %v", c, err)
	}
	v := enginetest.NewFake(driver.KindVLLM, enginetest.FakeOptions{})
	defer v.Close()
	if c, err := newDriver(t, driver.KindSGLang, v.URL).Capabilities(ctx); err != nil || c.Known || !c.Has(driver.FeatureSGLangPauseModes) {
		t.Fatalf("no /get_server_info: %+v %v", c, err)
	}
}

// keep on a release without pause modes would silently abort: the driver
// refuses it before anything is sent, naming the minimum release.
func TestSGLangKeepRefusedBeforePauseModes(t *testing.T) {
	f := enginetest.NewFake(driver.KindSGLang, enginetest.FakeOptions{SGLangRelease: "0.5.5"})
	defer f.Close()
	err := newDriver(t, driver.KindSGLang, f.URL).Pause(ctx, driver.PauseKeep, false)
	if !errors.Is(err, driver.ErrUnsupported) || !strings.Contains(err.Error(), "0.5.6") {
		t.Fatalf("%v", err)
	}
	if _, ok := f.Last("/pause_generation"); ok {
		t.Fatal("a refused pause was sent")
	}
}

// After a disk update SGLang serves the base model under the checkpoint
// path; the driver keeps answering to the launch name too (Models), and
// a generation for the run's model name is not mistaken for a LoRA
// adapter (no lora_path).
func TestSGLangServedNameAfterDiskUpdate(t *testing.T) {
	f := enginetest.NewFake(driver.KindSGLang, enginetest.FakeOptions{})
	defer f.Close()
	d := newDriver(t, driver.KindSGLang, f.URL)
	if err := d.LoadCheckpoint(ctx, "/ckpt/full-7", 7); err != nil {
		t.Fatal(err)
	}
	names, err := d.Models(ctx)
	if err != nil || !slices.Contains(names, "/ckpt/full-7") || !slices.Contains(names, "Qwen/Qwen3-0.6B") {
		t.Fatalf("models %v %v", names, err)
	}
	// A fresh driver (a restarted run) sees the renamed server.
	d2 := newDriver(t, driver.KindSGLang, f.URL)
	if _, err := d2.Generate(ctx, driver.GenerateRequest{Model: "Qwen/Qwen3-0.6B", PromptIDs: []int32{1, 2, 3}, MaxTokens: 1}); err != nil {
		t.Fatal(err)
	}
	c, _ := f.Last("/generate")
	var body map[string]any
	_ = json.Unmarshal(c.Body, &body)
	if _, ok := body["lora_path"]; ok {
		t.Fatalf("the base model was sent as a LoRA adapter: %s", c.Body)
	}
	if _, err := d2.Generate(ctx, driver.GenerateRequest{Model: "policy-adapter", PromptIDs: []int32{1, 2, 3}, MaxTokens: 1}); err != nil {
		t.Fatal(err)
	}
	c, _ = f.Last("/generate")
	body = nil
	_ = json.Unmarshal(c.Body, &body)
	if body["lora_path"] != "policy-adapter" {
		t.Fatalf("an adapter was not selected: %s", c.Body)
	}
}

// A server left paused fails the driver's Health (its /health is a
// generation) with the fix named.
func TestSGLangHealthWhilePausedNamesTheFix(t *testing.T) {
	f := enginetest.NewFake(driver.KindSGLang, enginetest.FakeOptions{SGLangHealthTimeout: 10 * time.Millisecond})
	defer f.Close()
	d := newDriver(t, driver.KindSGLang, f.URL)
	if err := d.Health(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.Pause(ctx, driver.PauseKeep, false); err != nil {
		t.Fatal(err)
	}
	err := d.Health(ctx)
	if re := routeError(t, err); re.Status != 503 || !strings.Contains(re.Hint, "continue_generation") {
		t.Fatalf("%v", err)
	}
}
