package proxy

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/actors/router/routertest"
)

func (h *harness) admin(method, path, token string) (int, map[string]any) {
	h.t.Helper()
	req, _ := http.NewRequest(method, h.url+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	var out map[string]any
	_ = json.Unmarshal([]byte(readAll(h.t, resp)), &out)
	return resp.StatusCode, out
}

func TestAdminAPI(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		a, b := routertest.Named(t, "a", nil), routertest.Named(t, "b", nil)
		h := start(t, testConfig(a))
		readAll(t, h.post("/v1/completions", "s1", "{}"))

		if code, _ := h.admin("GET", "/admin/nope", ""); code != 404 {
			t.Fatalf("unknown admin path: %d", code)
		}
		if code, _ := h.admin("PUT", "/admin/replicas", ""); code != 405 {
			t.Fatalf("wrong method: %d", code)
		}
		code, out := h.admin("GET", "/admin/replicas", "")
		reps, _ := out["replicas"].([]any)
		if code != 200 || len(reps) != 1 || out["sessions"].(float64) != 1 {
			t.Fatalf("list: %d %v", code, out)
		}
		if r0 := reps[0].(map[string]any); r0["url"] != a.URL || r0["sessions"].(float64) != 1 || r0["healthy"] != true {
			t.Fatalf("replica row %v", r0)
		}
		if code, _ := h.admin("POST", "/admin/replicas?url="+b.URL+"&version=3", ""); code != 201 {
			t.Fatalf("add: %d", code)
		}
		// a (version 0) lags b (version 3) by 3 versions.
		if _, out := h.admin("GET", "/admin/replicas", ""); len(out["replicas"].([]any)) != 2 {
			t.Fatalf("list after add: %v", out)
		} else {
			for _, r := range out["replicas"].([]any) {
				row := r.(map[string]any)
				if want := map[string]float64{a.URL: 3, b.URL: 0}[row["url"].(string)]; row["lag"].(float64) != want {
					t.Fatalf("lag of %v: %v, want %v", row["url"], row["lag"], want)
				}
			}
		}
		if code, _ := h.admin("POST", "/admin/replicas?url="+b.URL, ""); code != 409 {
			t.Fatalf("duplicate add: %d", code)
		}
		if code, _ := h.admin("POST", "/admin/replicas?url=ftp://x", ""); code != 400 {
			t.Fatalf("bad url: %d", code)
		}
		// min version 3: only b (version 3) takes new sessions.
		if code, out := h.admin("POST", "/admin/min_version?version=3", ""); code != 200 || out["min_version"].(float64) != 3 {
			t.Fatalf("min version: %d %v", code, out)
		}
		for i := 0; i < 3; i++ {
			resp := h.post("/v1/completions", "new"+string(rune('a'+i)), "{}")
			readAll(t, resp)
			if resp.Header.Get(ReplicaHeader) != b.URL {
				t.Fatalf("gated replica got a new session")
			}
		}
		if code, out := h.admin("GET", "/admin/sessions?session_id=newa", ""); code != 200 || out["replica"] != b.URL {
			t.Fatalf("lookup: %d %v", code, out)
		}
		if code, _ := h.admin("GET", "/admin/sessions?session_id=ghost", ""); code != 404 {
			t.Fatalf("lookup unknown: %d", code)
		}
		if code, _ := h.admin("POST", "/admin/replicas/version?url="+a.URL+"&version=3", ""); code != 200 {
			t.Fatalf("set version: %d", code)
		}
		if code, _ := h.admin("POST", "/admin/replicas/drain?url="+b.URL, ""); code != 200 {
			t.Fatalf("drain: %d", code)
		}
		for _, v := range h.r.Replicas() {
			if v.URL == b.URL && (v.State != policy.Draining || v.Eligible) {
				t.Fatalf("drained replica %+v", v)
			}
		}
		// Drained b keeps its session; new ones go to a.
		resp := h.post("/v1/completions", "newa", "{}")
		readAll(t, resp)
		if resp.Header.Get(ReplicaHeader) != b.URL {
			t.Fatal("draining replica lost its session")
		}
		resp = h.post("/v1/completions", "fresh", "{}")
		readAll(t, resp)
		if resp.Header.Get(ReplicaHeader) != a.URL {
			t.Fatal("new session on a draining replica")
		}
		if code, _ := h.admin("POST", "/admin/replicas/state?url="+b.URL+"&state=bogus", ""); code != 400 {
			t.Fatalf("bad state: %d", code)
		}
		if code, _ := h.admin("DELETE", "/admin/replicas?url="+b.URL, ""); code != 200 {
			t.Fatalf("remove: %d", code)
		}
		if code, _ := h.admin("DELETE", "/admin/replicas?url="+b.URL, ""); code != 404 {
			t.Fatalf("remove unknown: %d", code)
		}
		if len(h.r.Replicas()) != 1 {
			t.Fatal("remove did not remove")
		}
	})
}

func TestAdminTokenOffLoopback(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		a := routertest.Named(t, "a", nil)
		cfg := testConfig(a)
		cfg.ListenAddr = "0.0.0.0:8080"
		if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "AdminToken") {
			t.Fatalf("off-loopback without token accepted: %v", err)
		}
		cfg.AdminToken = "s3cret"
		h := start(t, cfg)
		if code, _ := h.admin("GET", "/admin/replicas", ""); code != 401 {
			t.Fatalf("no token: %d", code)
		}
		if code, _ := h.admin("GET", "/admin/replicas", "wrong"); code != 401 {
			t.Fatalf("wrong token: %d", code)
		}
		if code, _ := h.admin("GET", "/admin/replicas", "s3cret"); code != 200 {
			t.Fatalf("right token: %d", code)
		}
		// Proxied traffic needs no token.
		if resp := h.post("/v1/completions", "s", "{}"); readAll(t, resp) != "a" {
			t.Fatal("proxying blocked by admin token")
		}
	})
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{"": true, "127.0.0.1:80": true, "[::1]:80": true, "localhost:1": true,
		"0.0.0.0:80": false, ":8080": false, "10.0.0.1:80": false} {
		if isLoopback(addr) != want {
			t.Errorf("isLoopback(%q) != %v", addr, want)
		}
	}
}
