package main

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/engine/guard"
)

// asyncrl engine-guard refuses to start without a key, with a missing or
// empty key file, or without an engine URL, naming the flag.
func TestEngineGuardFlags(t *testing.T) {
	key := writeFile(t, "guard.key", "k-1\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"engine-guard", "--engine", "http://127.0.0.1:1"}, "--key-file is required"},
		{[]string{"engine-guard", "--engine", "http://127.0.0.1:1", "--key-file", filepath.Join(t.TempDir(), "none")}, "--key-file"},
		{[]string{"engine-guard", "--engine", "http://127.0.0.1:1", "--key-file", writeFile(t, "empty.key", " \n")}, "is empty"},
		{[]string{"engine-guard", "--key-file", key}, "--engine URL is required"},
		{[]string{"engine-guard", "--engine", "127.0.0.1:8001", "--key-file", key}, "bad engine URL"},
		{[]string{"engine-guard", "--engine", "http://127.0.0.1:1", "--key-file", key, "--engine-key-file", filepath.Join(t.TempDir(), "none")}, "--engine-key-file"},
	} {
		code, _, errOut := cli(t, c.args...)
		if code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 1 and %q", c.args, code, errOut, c.want)
		}
	}
}

// The command serves the guard: a keyed built-in engine behind it is
// paused only by a caller with the guard's key, which the guard replaces
// with the engine's own.
func TestEngineGuardServes(t *testing.T) {
	cfg := engine.DefaultConfig()
	cfg.TimeScale = 0
	e, err := engine.New(cfg, engine.NewHashModel(1), engine.WithAPIKey("engine-secret-3"))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	esrv := httptest.NewServer(e.Handler())
	defer esrv.Close()
	url, stop := startServer(t, "engine-guard", "engine-guard", "--engine", esrv.URL, "--listen", "127.0.0.1:0",
		"--key-file", writeFile(t, "guard.key", "guard-secret-1\n"), "--engine-key-file", writeFile(t, "engine.key", "engine-secret-3"))
	defer http.DefaultClient.CloseIdleConnections()
	post := func(auth string) int {
		req, _ := http.NewRequest(http.MethodPost, url+"/pause?mode=keep", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, auth := range []string{"", "Bearer engine-secret-3", "Bearer guard-secret-2"} {
		if code := post(auth); code != http.StatusUnauthorized || e.IsPaused() {
			t.Fatalf("pause with %q: %d (paused %v), want 401", auth, code, e.IsPaused())
		}
	}
	if code := post("Bearer guard-secret-1"); code != http.StatusOK || !e.IsPaused() {
		t.Fatalf("pause with the key: %d (paused %v)", code, e.IsPaused())
	}
	if code := stop(); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// The router in front of a guard: with the key (engines.api_key_file) its
// health probes and proxied completions pass the guard; without it the
// guard refuses the probes, the router marks the engine unhealthy and
// answers 503 — the probes, not only the proxied requests, carry the key.
func TestRouterThroughGuard(t *testing.T) {
	cfg := engine.DefaultConfig()
	cfg.TimeScale = 0
	e, err := engine.New(cfg, engine.NewHashModel(1))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	esrv := httptest.NewServer(e.Handler())
	defer esrv.Close()
	key := writeFile(t, "guard.key", "guard-secret-9\n")
	reg := prometheus.NewRegistry()
	gd, err := guard.New(guard.Config{Upstream: esrv.URL, Key: "guard-secret-9", Registerer: reg, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	gsrv := httptest.NewServer(gd)
	defer gsrv.Close()
	guardURL := gsrv.URL
	defer http.DefaultClient.CloseIdleConnections()
	count := func(name string) float64 {
		mfs, _ := reg.Gather()
		n := 0.0
		for _, mf := range mfs {
			if mf.GetName() == name {
				for _, m := range mf.GetMetric() {
					n += m.GetCounter().GetValue()
				}
			}
		}
		return n
	}

	router := func(withKey bool) (string, func() int) {
		y := "router:\n  health_check_interval: 20ms\n  unhealthy_threshold: 1\n"
		if withKey {
			y = "engines:\n  api_key_file: " + key + "\n" + y
		}
		return startServer(t, "router", "router", "--listen", "127.0.0.1:0", "--engine", guardURL, "--front", "net_http",
			"--config", writeFile(t, "run.yaml", y))
	}
	completion := func(url string) int {
		resp, err := http.Post(url+"/v1/completions", "application/json",
			strings.NewReader(`{"model":"asyncrl-policy","prompt":"rev abc=","max_tokens":2}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	poll := func(url string, want int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			got := completion(url)
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("completion through the router: %d, want %d", got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	keyed, stopKeyed := router(true)
	poll(keyed, http.StatusOK)
	// Wait for several health probes through the guard (requests beyond
	// the completions), none refused; the engine stays routable.
	base := count("asyncrl_engine_guard_requests_total")
	deadline := time.Now().Add(10 * time.Second)
	for count("asyncrl_engine_guard_requests_total") < base+5 {
		if time.Now().After(deadline) {
			t.Fatal("no health probes reached the guard")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r := count("asyncrl_engine_guard_refused_total"); r != 0 {
		t.Fatalf("the guard refused %v of the keyed router's requests", r)
	}
	if got := completion(keyed); got != http.StatusOK {
		t.Fatalf("after its health probes the keyed router answers %d", got)
	}
	if code := stopKeyed(); code != 0 {
		t.Fatalf("router exit %d", code)
	}

	bare, stopBare := router(false)
	poll(bare, http.StatusServiceUnavailable) // probes refused → unhealthy → 503, not the guard's 401
	if count("asyncrl_engine_guard_refused_total") == 0 {
		t.Fatal("the keyless router's probes were not refused")
	}
	if code := stopBare(); code != 0 {
		t.Fatalf("router exit %d", code)
	}
}
