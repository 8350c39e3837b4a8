package guard_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/engine/driver"
	"github.com/asyncrl/asyncrl/engine/enginetest"
	"github.com/asyncrl/asyncrl/engine/guard"
)

// TestDriverThroughGuardBuiltin: asyncrl's driver, with the guard's key,
// drives a keyed built-in engine through the guard, which sends the
// engine's own key: health, pause (keep), is_paused, a collective_rpc
// (asyncrl_loaded_version), resume and a token-in/token-out completion. A
// driver without the key, or with the engine's key, gets a 401 RouteError
// and the engine stays unpaused.
func TestDriverThroughGuardBuiltin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := engine.DefaultConfig()
	cfg.TimeScale = 0
	e, err := engine.New(cfg, engine.NewHashModel(1), engine.WithAPIKey(engKey))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	esrv := httptest.NewServer(e.Handler())
	defer esrv.Close()
	f := newGuard(t, guard.Config{Upstream: esrv.URL, Key: guardKey, UpstreamKey: engKey})

	for _, key := range []string{"", engKey} {
		d, err := driver.New(driver.KindBuiltin, f.srv.URL, driver.Options{APIKey: key})
		if err != nil {
			t.Fatal(err)
		}
		err = d.Pause(ctx, driver.PauseKeep, false)
		var re *driver.RouteError
		if !errors.As(err, &re) || re.Status != http.StatusUnauthorized {
			t.Fatalf("driver with key %q: %v, want a 401 RouteError", key, err)
		}
		if key != "" && strings.Contains(err.Error(), key) {
			t.Errorf("the error quotes the key: %v", err)
		}
		if e.IsPaused() {
			t.Fatal("a refused pause paused the engine")
		}
	}

	d, err := driver.New(driver.KindBuiltin, f.srv.URL, driver.Options{APIKey: guardKey})
	if err != nil {
		t.Fatal(err)
	}
	defer closeIdle(d)
	if err := d.Health(ctx); err != nil {
		t.Fatalf("health through the guard: %v", err)
	}
	if err := d.Pause(ctx, driver.PauseKeep, false); err != nil {
		t.Fatalf("pause through the guard: %v", err)
	}
	if !e.IsPaused() {
		t.Fatal("the engine is not paused")
	}
	if p, err := d.IsPaused(ctx); err != nil || !p {
		t.Fatalf("is_paused %v %v", p, err)
	}
	if v, err := d.ServedVersion(ctx); err != nil || v != e.Version() {
		t.Fatalf("collective_rpc asyncrl_loaded_version: %d %v, engine at %d", v, err, e.Version())
	}
	if err := d.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if e.IsPaused() {
		t.Fatal("the engine is still paused")
	}
	res, err := d.Generate(ctx, driver.GenerateRequest{PromptIDs: []int32{5, 6, 7}, MaxTokens: 4})
	if err != nil || len(res.TokenIDs) == 0 || len(res.TokenIDs) > 4 || len(res.PromptIDs) != 3 {
		t.Fatalf("completion through the guard: %+v %v", res, err)
	}
	// Each refused driver sent two requests: the capability probe (GET
	// /version, which a pause reads first) and the pause.
	checkCounter(t, f, "asyncrl_engine_guard_refused_total", map[string]string{"reason": guard.ReasonNoKey}, 2)
	checkCounter(t, f, "asyncrl_engine_guard_refused_total", map[string]string{"reason": guard.ReasonWrongKey}, 2)
}

// TestDriverThroughGuardVLLM: the vLLM driver drives a fake vLLM (dev
// mode, LoRA, asyncrl's worker extension; enginetest's fixtures) through
// the guard: a checkpoint load over /collective_rpc with vLLM's body, a
// pause with vLLM's query, sleep, LoRA and a completion — the fake
// receives each unchanged.
func TestDriverThroughGuardVLLM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fk := enginetest.NewFake(driver.KindVLLM, enginetest.FakeOptions{DevMode: true, LoRA: true, Extension: true, Workers: 2})
	defer fk.Close()
	f := newGuard(t, guard.Config{Upstream: fk.URL, Key: guardKey})

	bare, _ := driver.New(driver.KindVLLM, f.srv.URL, driver.Options{})
	if err := bare.LoadCheckpoint(ctx, "/etc", 9); err == nil {
		t.Fatal("a keyless collective_rpc passed the guard")
	}
	closeIdle(bare)
	if n := len(fk.Calls()); n != 0 {
		t.Fatalf("the fake engine saw %d requests from a keyless driver", n)
	}

	d, _ := driver.New(driver.KindVLLM, f.srv.URL, driver.Options{APIKey: guardKey})
	defer closeIdle(d)
	if err := d.Pause(ctx, driver.PauseKeep, false); err != nil {
		t.Fatal(err)
	}
	if c, _ := fk.Last("/pause"); c.Query != "clear_cache=false&mode=keep" && c.Query != "mode=keep&clear_cache=false" {
		t.Fatalf("pause query %q", c.Query)
	}
	if err := d.LoadCheckpoint(ctx, "/ckpt/full-7", 7); err != nil {
		t.Fatal(err)
	}
	c, _ := fk.Last("/collective_rpc")
	if !strings.Contains(string(c.Body), `"asyncrl_load_checkpoint"`) || !strings.Contains(string(c.Body), `"/ckpt/full-7"`) {
		t.Fatalf("collective_rpc body %s", c.Body)
	}
	if v, err := d.ServedVersion(ctx); err != nil || v != 7 {
		t.Fatalf("served version %d %v", v, err)
	}
	if err := d.Sleep(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := d.WakeUp(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.LoadLoRA(ctx, "policy", "/ckpt/lora-3"); err != nil {
		t.Fatal(err)
	}
	if err := d.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := d.Generate(ctx, driver.GenerateRequest{PromptIDs: []int32{1, 2}, MaxTokens: 2})
	if err != nil || len(res.TokenIDs) != 2 {
		t.Fatalf("completion %+v %v", res, err)
	}
}

// closeIdle closes a driver's idle connections when it has a way to.
func closeIdle(d driver.Driver) {
	if c, ok := d.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
	http.DefaultClient.CloseIdleConnections()
}
