package main

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/engine"
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
