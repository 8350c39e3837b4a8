package guard_test

import (
	"bytes"
	"net/http"
	"sort"
	"testing"

	"github.com/asyncrl/asyncrl/engine/driver"
	"github.com/asyncrl/asyncrl/engine/enginetest"
	"github.com/asyncrl/asyncrl/engine/guard"
)

// route is one of vLLM's HTTP routes.
type route struct{ Method, Path string }

// vllmOpenRoutes are vLLM routes outside the prefixes its
// AuthenticationMiddleware checks (/v1 only in
// vllm/entrypoints/openai/server_utils.py @387dcddc84e36ed6b330da5aab3833410b315726;
// /v1, /v2, /inference, /cohere in
// vllm/entrypoints/serve/middleware/authenticate.py @baaf6e9c171b38e155d4191ac29f3a4a08817146),
// so --api-key leaves them open. Each group cites the file that registers
// it (vllm-project/vllm).
var vllmOpenRoutes = []route{
	// vllm/entrypoints/serve/dev/rlhf/api_router.py @0100a2129224e729af1b3b8ed42a900cdfe9a452
	// (VLLM_SERVER_DEV_MODE=1)
	{"POST", "/pause"}, {"POST", "/resume"}, {"POST", "/abort_requests"}, {"GET", "/is_paused"},
	{"POST", "/init_weight_transfer_engine"}, {"POST", "/start_weight_update"},
	{"POST", "/start_draft_weight_update"}, {"POST", "/update_weights"},
	{"POST", "/finish_weight_update"}, {"POST", "/update_weight_version"},
	{"GET", "/weight_info"}, {"POST", "/weight_checker"}, {"GET", "/get_world_size"},
	// vllm/entrypoints/serve/dev/sleep/api_router.py @e7a47b821ef469bb455f75b4129eb365bb6ab9eb
	{"POST", "/sleep"}, {"POST", "/wake_up"}, {"GET", "/is_sleeping"},
	// vllm/entrypoints/serve/dev/cache/api_router.py @b35f7c2b76d3cb04312ff6caa37b610163dbbf53
	{"POST", "/reset_prefix_cache"}, {"POST", "/reset_mm_cache"}, {"POST", "/reset_encoder_cache"},
	// vllm/entrypoints/serve/dev/rpc/api_router.py @cd20a5785d36d73795dc3e87088ca370f9efe807
	{"POST", "/collective_rpc"},
	// vllm/entrypoints/serve/dev/server_info/api_router.py @152c32ccb59bdd7152d20b1607b739ba3a400d6b
	{"GET", "/server_info"},
	// Top-level routes named open under --api-key in vllm-project/vllm
	// issue #18892 (health, load, ping, tokenize, version, pooling,
	// scoring), PR #55536 (elastic EP scaling, profiler), PR #58028
	// (metrics) and issue #58144 (/invocations, SageMaker).
	{"POST", "/scale_elastic_ep"}, {"POST", "/is_scaling_elastic_ep"},
	{"POST", "/start_profile"}, {"POST", "/stop_profile"},
	{"POST", "/tokenize"}, {"POST", "/detokenize"}, {"POST", "/invocations"},
	{"POST", "/pooling"}, {"POST", "/classify"}, {"POST", "/score"}, {"POST", "/rerank"},
	{"GET", "/health"}, {"GET", "/load"}, {"GET", "/ping"}, {"POST", "/ping"}, {"GET", "/version"},
	{"GET", "/metrics"},
}

// allVLLMRoutes is vllmOpenRoutes plus every route of the vLLM fixtures
// asyncrl's drivers use (engine/enginetest/testdata/vllm), /v1 ones
// included, with the fixture's query and request body.
func allVLLMRoutes(t *testing.T) []call {
	t.Helper()
	calls := map[route]call{}
	for _, r := range vllmOpenRoutes {
		calls[r] = call{Method: r.Method, Path: r.Path, Body: []byte(`{"probe":1}`)}
	}
	for _, fx := range enginetest.MustFixtures(driver.KindVLLM) {
		if fx.Path == "" || fx.Method == "" {
			continue
		}
		c := call{Method: fx.Method, Path: fx.Path}
		if len(fx.Request) > 0 && string(fx.Request) != "null" {
			c.Body = fx.Request
		}
		if len(fx.Query) > 0 {
			keys := make([]string, 0, len(fx.Query))
			for k := range fx.Query {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for i, k := range keys {
				if i > 0 {
					c.Query += "&"
				}
				c.Query += k + "=" + fx.Query[k]
			}
		}
		calls[route{c.Method, c.Path}] = c
	}
	out := make([]call, 0, len(calls))
	for _, c := range calls {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Method+out[i].Path < out[j].Method+out[j].Path })
	return out
}

type call struct {
	Method, Path, Query string
	Body                []byte
}

func (c call) url(base string) string {
	if c.Query == "" {
		return base + c.Path
	}
	return base + c.Path + "?" + c.Query
}

// TestEveryVLLMRouteNeedsTheKey: each of vLLM's routes — the control
// routes its --api-key leaves open and the /v1 routes it guards — answers
// 401 through the guard without the key, with another scheme and with a
// wrong key, and the engine sees none of those; with the key, the engine
// receives the request unchanged (method, path, query, body) and with the
// upstream key when one is configured, else the caller's.
func TestEveryVLLMRouteNeedsTheKey(t *testing.T) {
	routes := allVLLMRoutes(t)
	if len(routes) < len(vllmOpenRoutes) {
		t.Fatalf("%d routes", len(routes))
	}
	for _, tc := range []struct {
		name, upstreamKey, wantAuth string
	}{
		{"same key", "", "Bearer " + guardKey},
		{"upstream key", engKey, "Bearer " + engKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := newRecorder(t)
			f := newGuard(t, guard.Config{Upstream: eng.URL, Key: guardKey, UpstreamKey: tc.upstreamKey})
			for _, c := range routes {
				for _, bad := range []struct{ auth, reason string }{
					{"", guard.ReasonNoKey},
					{"Basic " + guardKey, guard.ReasonNotBearer},
					{"Bearer wrong-" + guardKey, guard.ReasonWrongKey},
					{"Bearer", guard.ReasonNotBearer},
					{"Bearer " + engKey, guard.ReasonWrongKey},
				} {
					resp, body := do(t, c.Method, c.url(f.srv.URL), bad.auth, c.Body)
					if resp.StatusCode != http.StatusUnauthorized || string(body) != `{"error":"Unauthorized"}` {
						t.Errorf("%s %s with %q: %d %s, want 401 {\"error\":\"Unauthorized\"}", c.Method, c.Path, bad.auth, resp.StatusCode, body)
					}
				}
				if got := eng.take(); len(got) != 0 {
					t.Fatalf("%s %s: refused requests reached the engine: %+v", c.Method, c.Path, got)
				}
				// The scheme is case-insensitive, as vLLM reads it.
				for _, auth := range []string{"Bearer " + guardKey, "bearer " + guardKey} {
					resp, body := do(t, c.Method, c.url(f.srv.URL), auth, c.Body)
					if resp.StatusCode != http.StatusOK || string(body) != `{"ok":true}` {
						t.Errorf("%s %s with the key: %d %s", c.Method, c.Path, resp.StatusCode, body)
					}
					got := eng.take()
					if len(got) != 1 {
						t.Fatalf("%s %s with the key: the engine saw %d requests", c.Method, c.Path, len(got))
					}
					want := tc.wantAuth
					if tc.upstreamKey == "" {
						want = auth // the caller's header, unchanged
					}
					s := got[0]
					if s.Method != c.Method || s.Path != c.Path || s.Query != c.Query || !bytes.Equal(s.Body, c.Body) || s.Auth != want {
						t.Errorf("%s %s: the engine saw %s %s?%s auth %q body %s; want query %q auth %q body %s",
							c.Method, c.Path, s.Method, s.Path, s.Query, s.Auth, s.Body, c.Query, want, c.Body)
					}
				}
			}
			n := float64(len(routes))
			checkCounter(t, f, "asyncrl_engine_guard_requests_total", nil, 7*n)
			checkCounter(t, f, "asyncrl_engine_guard_refused_total", map[string]string{"reason": guard.ReasonNoKey}, n)
			checkCounter(t, f, "asyncrl_engine_guard_refused_total", map[string]string{"reason": guard.ReasonNotBearer}, 2*n)
			checkCounter(t, f, "asyncrl_engine_guard_refused_total", map[string]string{"reason": guard.ReasonWrongKey}, 2*n)
		})
	}
}
