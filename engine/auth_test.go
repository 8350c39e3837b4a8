package engine

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestAPIKeyGuardsEveryRoute: with a key, every route (generation,
// control, metrics, health) answers 401 with vLLM's body to a request
// without the key or with a wrong one, and the refused request changes
// nothing; the right key (scheme case-insensitive, as vLLM) passes.
func TestAPIKeyGuardsEveryRoute(t *testing.T) {
	h := newHarness(t, testConfig(), WithAPIKey("k-123"))
	for _, hdr := range [][]string{nil, {"Authorization", "Bearer wrong"}, {"Authorization", "Basic k-123"}, {"Authorization", "k-123"}} {
		for _, path := range []string{"/pause", "/v1/completions", "/update_weights", "/collective_rpc", "/v1/load_lora_adapter", "/sleep"} {
			code, hd, body := h.post(path, map[string]any{"prompt": "ab", "max_tokens": 1}, hdr...)
			if code != http.StatusUnauthorized || strings.TrimSpace(string(body)) != `{"error":"Unauthorized"}` {
				t.Errorf("POST %s %v: %d %s, want 401 Unauthorized", path, hdr, code, body)
			}
			if !strings.HasPrefix(hd.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("POST %s: no WWW-Authenticate", path)
			}
		}
	}
	for _, path := range []string{"/health", "/metrics", "/v1/models", "/is_paused"} {
		if code, _ := h.get(path); code != http.StatusUnauthorized {
			t.Errorf("GET %s without key: %d, want 401", path, code)
		}
	}
	if h.e.IsPaused() || h.e.IsSleeping() {
		t.Fatal("a refused /pause or /sleep changed the engine")
	}
	if code, _, body := h.post("/pause?mode=keep", nil, "Authorization", "bearer k-123"); code != http.StatusOK {
		t.Fatalf("/pause with the key: %d %s", code, body)
	}
	if !h.e.IsPaused() {
		t.Fatal("/pause with the key did not pause")
	}
	// The refusals are counted under an asyncrl_ name; the key is not in
	// the metrics.
	req, _ := http.NewRequest(http.MethodGet, h.srv.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer k-123")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(buf), "asyncrl_engine_unauthorized_requests_total") || strings.Contains(string(buf), "k-123") {
		t.Errorf("metrics: want the unauthorized counter and no key:\n%.400s", buf)
	}
}

// fixedAddr is a listener that reports addr (Serve checks it first).
type fixedAddr struct {
	net.Listener
	addr string
}

func (f fixedAddr) Addr() net.Addr { a, _ := net.ResolveTCPAddr("tcp", f.addr); return a }

// TestServeOffLoopbackNeedsKey: Serve refuses a listener off loopback
// without a key (and says how to set one); with a key, or on loopback, it
// serves.
func TestServeOffLoopbackNeedsKey(t *testing.T) {
	e, err := New(testConfig(), NewHashModel(1))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, addr := range []string{"10.0.0.5:8000", "0.0.0.0:8000", "[::]:8000"} {
		err := e.Serve(context.Background(), fixedAddr{ln, addr})
		if !errors.Is(err, ErrNoAPIKey) || !strings.Contains(err.Error(), "--api-key-file") {
			t.Errorf("%s without a key: %v, want ErrNoAPIKey naming the flag", addr, err)
		}
	}
	if err := e.CheckListen("127.0.0.1:8000"); err != nil {
		t.Errorf("loopback: %v", err)
	}
	k, err := New(testConfig(), NewHashModel(1), WithAPIKey("k"))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if err := k.CheckListen("10.0.0.5:8000"); err != nil {
		t.Errorf("off loopback with a key: %v", err)
	}
}

// TestWeightRootsRefuseOutsidePaths: with weight roots, every weight
// route refuses a path outside them with 403 before the loader (or the
// delta reader) opens anything: a plain outside path, a ../ escape and a
// symlink inside a root pointing out; a path inside loads.
func TestWeightRootsRefuseOutsidePaths(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "ckpt"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var opened []string
	loader := func(dir string) (Model, error) {
		mu.Lock()
		defer mu.Unlock()
		opened = append(opened, dir)
		return NewHashModel(2), nil
	}
	h := newHarness(t, testConfig(), WithLoader(loader), WithWeightRoots(root))
	bad := []string{outside, filepath.Join(root, "..", filepath.Base(outside)), filepath.Join(root, "link"), filepath.Join(root, "link", "sub"), "/etc"}
	for _, p := range bad {
		for _, c := range []struct {
			path string
			body any
		}{
			{"/update_weights", map[string]any{"checkpoint_dir": p, "version": 1}},
			{"/collective_rpc", map[string]any{"method": RPCLoadCheckpoint, "args": []any{p, 1}}},
			{"/collective_rpc", map[string]any{"method": RPCApplyDelta, "args": []any{p, 1}}},
			{"/v1/load_lora_adapter", map[string]any{"lora_name": "a", "lora_path": p}},
		} {
			code, _, body := h.post(c.path, c.body)
			if code != http.StatusForbidden || !strings.Contains(string(body), "outside the weight roots") {
				t.Errorf("%s %s: %d %s, want 403", c.path, p, code, body)
			}
		}
	}
	mu.Lock()
	if len(opened) != 0 {
		t.Errorf("the loader opened %v for refused paths", opened)
	}
	mu.Unlock()
	if h.e.Version() != 0 {
		t.Errorf("version %d after refused loads, want 0", h.e.Version())
	}
	in := filepath.Join(root, "ckpt")
	if code, _, body := h.post("/update_weights", map[string]any{"checkpoint_dir": in, "version": 1}); code != http.StatusOK {
		t.Fatalf("inside the root: %d %s", code, body)
	}
	if len(opened) != 1 || opened[0] != in || h.e.Version() != 1 {
		t.Errorf("inside the root: opened %v, version %d", opened, h.e.Version())
	}
	if err := h.e.LoadLoRA("x", outside); !errors.Is(err, ErrPathNotAllowed) {
		t.Errorf("Go LoadLoRA outside: %v", err)
	}
}
