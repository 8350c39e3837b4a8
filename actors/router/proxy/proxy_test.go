package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/actors/router/routertest"
)

// harness is a router served on 127.0.0.1 (Router.Serve, with the front
// end the test runs under: eachFront) in front of backends.
type harness struct {
	t      *testing.T
	r      *Router
	url    string
	client *http.Client
	reg    *prometheus.Registry
}

func testConfig(backends ...*httptest.Server) Config {
	cfg := DefaultConfig()
	cfg.HealthInterval = 0
	cfg.MetricsInterval = 0
	for _, b := range backends {
		cfg.Replicas = append(cfg.Replicas, b.URL)
	}
	return cfg
}

// fronts are the front ends every behaviour test runs against.
var fronts = []string{FrontFast, FrontLoop, FrontNetHTTP}

// eachFront runs test once per front end, as subtests named after them;
// start serves the router with the front its subtest names.
func eachFront(t *testing.T, test func(t *testing.T)) {
	for _, f := range fronts {
		t.Run(f, test)
	}
}

// fastFronts runs test against the fronts that read HTTP/1.1 themselves
// (fast and loop), as subtests named after them.
func fastFronts(t *testing.T, test func(t *testing.T)) {
	for _, f := range []string{FrontFast, FrontLoop} {
		t.Run(f, test)
	}
}

// frontOf is the front end a (sub)test runs under: the eachFront
// subtest in its name; FrontFast outside eachFront.
func frontOf(t *testing.T) string {
	for _, part := range strings.Split(t.Name(), "/") {
		if part == FrontNetHTTP || part == FrontLoop {
			return part
		}
	}
	return FrontFast
}

func start(t *testing.T, cfg Config) *harness {
	t.Helper()
	h := &harness{t: t, reg: prometheus.NewRegistry()}
	cfg.Registerer = h.reg
	cfg.Front = frontOf(t)
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.r = r
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.url = "http://" + ln.Addr().String()
	served := make(chan error, 1)
	go func() { served <- r.Serve(ln) }()
	h.client = &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 10 * time.Second}
	t.Cleanup(func() {
		h.client.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := r.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return h
}

func (h *harness) post(path, session, body string) *http.Response {
	h.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.url+path, strings.NewReader(body))
	if session != "" {
		req.Header.Set("X-Session-ID", session)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestStickyRoutingObservedViaHeader(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		a, b := routertest.Named(t, "a", nil), routertest.Named(t, "b", nil)
		h := start(t, testConfig(a, b))
		seen := map[string]string{}
		for round := 0; round < 3; round++ {
			for _, s := range []string{"s1", "s2", "s3", "s4"} {
				resp := h.post("/v1/completions", s, `{"prompt":"hi","max_tokens":4}`)
				body := readAll(t, resp)
				rep := resp.Header.Get(ReplicaHeader)
				if rep != a.URL && rep != b.URL {
					t.Fatalf("replica header %q", rep)
				}
				if (rep == a.URL) != (body == "a") {
					t.Fatalf("header %s but body %s", rep, body)
				}
				if prev, ok := seen[s]; ok && prev != rep {
					t.Fatalf("session %s moved %s → %s", s, prev, rep)
				}
				seen[s] = rep
			}
		}
		n := map[string]int{}
		for _, rep := range seen {
			n[rep]++
		}
		if n[a.URL] != 2 || n[b.URL] != 2 {
			t.Fatalf("4 sessions over 2 replicas should split 2/2: %v", n)
		}
		if v, ok := h.r.Lookup("s1"); !ok || v.Replica != seen["s1"] {
			t.Fatalf("lookup: %+v", v)
		}
		// finish releases the session.
		resp := h.post("/finish_session?session_id=s1", "", "")
		if got := readAll(t, resp); resp.StatusCode != 200 || !strings.Contains(got, `"released":true`) {
			t.Fatalf("finish: %d %s", resp.StatusCode, got)
		}
		if _, ok := h.r.Lookup("s1"); ok {
			t.Fatal("session still tracked after finish")
		}
		// Every request is Done: nothing left in flight.
		for _, v := range h.r.Replicas() {
			if v.InflightRequests != 0 || v.InflightTokens != 0 {
				t.Fatalf("in-flight leak: %+v", v)
			}
		}
		if got := testutil.ToFloat64(h.r.metrics.requests.WithLabelValues(a.URL, "200")) +
			testutil.ToFloat64(h.r.metrics.requests.WithLabelValues(b.URL, "200")); got != 12 {
			t.Fatalf("requests_total = %v, want 12", got)
		}
		if got := testutil.ToFloat64(h.r.metrics.decisions.WithLabelValues("sticky_hit")); got != 8 {
			t.Fatalf("sticky_hit decisions = %v, want 8", got)
		}
		if n, err := testutil.GatherAndCount(h.reg, "asyncrl_router_sessions", "asyncrl_router_overhead_seconds"); err != nil || n != 3 {
			t.Fatalf("gathered %d series (%v)", n, err)
		}
	})
}

func TestMalformedJSONRoutesByHeader(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		a, b := routertest.Named(t, "a", nil), routertest.Named(t, "b", nil)
		h := start(t, testConfig(a, b))
		first := ""
		for i := 0; i < 4; i++ {
			resp := h.post("/v1/completions", "traj-9", `{"prompt": "unterminated`)
			readAll(t, resp)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			rep := resp.Header.Get(ReplicaHeader)
			if first == "" {
				first = rep
			} else if rep != first {
				t.Fatalf("malformed body broke stickiness: %s vs %s", rep, first)
			}
		}
		if v, ok := h.r.Lookup("traj-9"); !ok || v.Replica != first {
			t.Fatalf("session not tracked by header: %+v", v)
		}
	})
}

func TestOversizedBody413(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		var hits atomic.Int64
		a := routertest.Named(t, "a", &hits)
		cfg := testConfig(a)
		cfg.MaxBodyBytes = 1024
		h := start(t, cfg)
		resp := h.post("/v1/completions", "s", `{"prompt":"`+strings.Repeat("x", 4096)+`"}`)
		body := readAll(t, resp)
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d", resp.StatusCode)
		}
		var e struct {
			Error struct {
				Message string `json:"message"`
				Code    int    `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code != 413 || e.Error.Message == "" {
			t.Fatalf("error body %q (%v)", body, err)
		}
		if hits.Load() != 0 {
			t.Fatal("oversized request reached the backend")
		}
	})
}

func TestStreamingPassthrough(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		release := make(chan struct{})
		a := routertest.Backend(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"n\":1}\n\n")
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
			fmt.Fprint(w, "data: [DONE]\n\n")
		})
		h := start(t, testConfig(a))
		resp := h.post("/v1/completions", "s", `{"prompt":"x","stream":true}`)
		defer resp.Body.Close()
		rd := bufio.NewReader(resp.Body)
		line, err := rd.ReadString('\n')
		if err != nil || line != "data: {\"n\":1}\n" {
			t.Fatalf("first chunk %q %v", line, err)
		}
		// The first event arrived while the backend is still blocked: streamed.
		close(release)
		rest, err := io.ReadAll(rd)
		if err != nil || !strings.Contains(string(rest), "[DONE]") {
			t.Fatalf("rest %q %v", rest, err)
		}
	})
}

func TestClientDisconnectCancelsUpstream(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		cancelled := make(chan struct{})
		a := routertest.Backend(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: start\n\n")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			close(cancelled)
		})
		h := start(t, testConfig(a))
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.url+"/v1/completions", strings.NewReader(`{}`))
		resp, err := h.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		cancel()
		resp.Body.Close()
		select {
		case <-cancelled:
		case <-time.After(5 * time.Second):
			t.Fatal("backend never saw the cancellation")
		}
		routertest.Eventually(t, "in-flight released", func() bool { return h.r.Replicas()[0].InflightRequests == 0 })
	})
}

func TestBackendKilledMidStream(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		a := routertest.Backend(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: partial\n\n")
			w.(http.Flusher).Flush()
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close() // the engine dies mid-response
			}
		})
		h := start(t, testConfig(a))
		resp := h.post("/v1/completions", "s", `{}`)
		defer resp.Body.Close()
		done := make(chan error, 1)
		go func() {
			_, err := io.ReadAll(resp.Body)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("client got a clean EOF from a response that was cut off")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("client hangs after the backend died")
		}
		routertest.Eventually(t, "in-flight released", func() bool { return h.r.Replicas()[0].InflightRequests == 0 })
		if got := testutil.ToFloat64(h.r.metrics.errors.WithLabelValues(a.URL, "upstream_stream")); got != 1 {
			t.Fatalf("upstream_stream errors = %v", got)
		}
	})
}

func TestRetryOn503GoesToDifferentReplica(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		var badHits, goodHits atomic.Int64
		bad := routertest.Backend(t, func(w http.ResponseWriter, r *http.Request) {
			badHits.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
		})
		good := routertest.Named(t, "good", &goodHits)
		h := start(t, testConfig(bad, good))
		for i := 0; i < 4; i++ {
			resp := h.post("/v1/completions", fmt.Sprint("s", i), `{"prompt":"p"}`)
			body := readAll(t, resp)
			if resp.StatusCode != 200 || body != "good" || resp.Header.Get(ReplicaHeader) != good.URL {
				t.Fatalf("request %d: %d %q via %s", i, resp.StatusCode, body, resp.Header.Get(ReplicaHeader))
			}
		}
		if badHits.Load() == 0 {
			t.Fatal("the 503 replica was never tried; the test proves nothing")
		}
		if got := testutil.ToFloat64(h.r.metrics.retries.WithLabelValues("status_503")); got != float64(badHits.Load()) {
			t.Fatalf("retries %v, bad hits %d", got, badHits.Load())
		}
	})
}

func TestRetryOnConnectionFailureAndBudget(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		dead := deadURL(t)
		good := routertest.Named(t, "good", nil)
		cfg := DefaultConfig()
		cfg.HealthInterval, cfg.MetricsInterval = 0, 0
		cfg.Replicas = []string{dead, good.URL}
		cfg.Policy.Policy = policy.RoundRobin
		cfg.RetryBurst, cfg.RetryRatio = 2, 0 // budget: exactly two retries
		h := start(t, cfg)
		codes := map[int]int{}
		for i := 0; i < 8; i++ {
			resp := h.post("/v1/completions", "", `{}`)
			readAll(t, resp)
			codes[resp.StatusCode]++
		}
		// Round robin (cursor after the replica it last chose): requests 1 and
		// 2 hit the dead replica first and are retried onto the good one (the
		// cursor then points at the dead one again); the budget is spent, so
		// from then on requests alternate dead (502) and good (200).
		if codes[200] != 5 || codes[502] != 3 {
			t.Fatalf("codes %v, want 5×200 and 3×502", codes)
		}
		if got := testutil.ToFloat64(h.r.metrics.retries.WithLabelValues("connect")); got != 2 {
			t.Fatalf("retries %v", got)
		}
	})
}

func TestHealthChecksRemoveAndRestore(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		var down atomic.Bool
		flaky := routertest.Backend(t, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/health" && down.Load() {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			fmt.Fprint(w, "flaky")
		})
		steady := routertest.Named(t, "steady", nil)
		cfg := testConfig(flaky, steady)
		cfg.HealthInterval = 10 * time.Millisecond
		cfg.HealthTimeout = time.Second
		cfg.Policy.FailThreshold, cfg.Policy.RecoverThreshold = 2, 2
		h := start(t, cfg)
		healthy := func(u string) bool {
			for _, v := range h.r.Replicas() {
				if v.URL == u {
					return v.Healthy
				}
			}
			return false
		}
		down.Store(true)
		routertest.Eventually(t, "flaky marked unhealthy", func() bool { return !healthy(flaky.URL) })
		for i := 0; i < 6; i++ {
			resp := h.post("/v1/completions", fmt.Sprint("s", i), `{}`)
			if body := readAll(t, resp); body != "steady" {
				t.Fatalf("request went to the unhealthy replica: %q", body)
			}
		}
		down.Store(false)
		routertest.Eventually(t, "flaky healthy again", func() bool { return healthy(flaky.URL) })
		got := map[string]bool{}
		for i := 0; i < 10; i++ {
			got[readAll(t, h.post("/v1/completions", fmt.Sprint("new", i), `{}`))] = true
		}
		if !got["flaky"] {
			t.Fatal("recovered replica receives no new sessions")
		}
	})
}

func TestMetricsScrapeFeedsCore(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		a := routertest.Backend(t, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/metrics" {
				fmt.Fprint(w, "# HELP vllm:num_requests_waiting x\nvllm:num_requests_waiting{model_name=\"m\"} 7\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.5\n")
			}
		})
		cfg := testConfig(a)
		cfg.MetricsInterval = 10 * time.Millisecond
		h := start(t, cfg)
		routertest.Eventually(t, "scraped metrics", func() bool {
			v := h.r.Replicas()[0]
			return v.QueueLen == 7 && v.KVUsage == 0.5
		})
	})
}

func TestHopByHopHeadersStripped(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		got := make(chan http.Header, 1)
		a := routertest.Backend(t, func(w http.ResponseWriter, r *http.Request) {
			got <- r.Header.Clone()
			w.Header().Set("Keep-Alive", "timeout=5")
			w.Header().Set("X-Engine", "yes")
		})
		h := start(t, testConfig(a))
		req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/completions", strings.NewReader("{}"))
		req.Header.Set("Connection", "X-Secret")
		req.Header.Set("X-Secret", "hop")
		req.Header.Set("Proxy-Authorization", "Basic abc")
		req.Header.Set("X-Keep", "end-to-end")
		resp, err := h.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		hdr := <-got
		if hdr.Get("X-Secret") != "" || hdr.Get("Proxy-Authorization") != "" || hdr.Get("X-Keep") != "end-to-end" {
			t.Fatalf("upstream headers %v", hdr)
		}
		if resp.Header.Get("Keep-Alive") != "" || resp.Header.Get("X-Engine") != "yes" {
			t.Fatalf("response headers %v", resp.Header)
		}
	})
}

func TestGatedAndNoReplica(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		a := routertest.Named(t, "a", nil)
		cfg := testConfig(a)
		cfg.Policy.LagRule = policy.LagHold
		h := start(t, cfg)
		readAll(t, h.post("/v1/completions", "s", `{}`))
		if err := h.r.Apply(policy.SetState{URL: a.URL, State: policy.Updating}); err != nil {
			t.Fatal(err)
		}
		resp := h.post("/v1/completions", "s", `{}`)
		readAll(t, resp)
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("held session: %d retry-after %q", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		resp = h.post("/v1/completions", "other", `{}`)
		readAll(t, resp)
		if resp.StatusCode != 503 {
			t.Fatalf("no replica: %d", resp.StatusCode)
		}
	})
}

func TestShutdownDrains(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		release := make(chan struct{})
		entered := make(chan struct{})
		a := routertest.Backend(t, func(w http.ResponseWriter, r *http.Request) {
			close(entered)
			<-release
			fmt.Fprint(w, "finished")
		})
		h := start(t, testConfig(a))
		result := make(chan string, 1)
		go func() {
			resp, err := h.client.Post(h.url+"/v1/completions", "application/json", strings.NewReader("{}"))
			if err != nil {
				result <- err.Error()
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			result <- string(b)
		}()
		<-entered
		shut := make(chan error, 1)
		go func() { shut <- h.r.Shutdown(context.Background()) }()
		routertest.Eventually(t, "new requests refused", func() bool {
			resp := h.post("/v1/completions", "", "{}")
			readAll(t, resp)
			return resp.StatusCode == 503
		})
		select {
		case err := <-shut:
			t.Fatalf("shutdown returned %v with a request in flight", err)
		default:
		}
		close(release)
		if got := <-result; got != "finished" {
			t.Fatalf("in-flight request: %q", got)
		}
		if err := <-shut; err != nil {
			t.Fatal(err)
		}
		// A shutdown with an expired context reports it.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := h.r.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	})
}

func TestConcurrentRequests(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		a, b := routertest.Named(t, "a", nil), routertest.Named(t, "b", nil)
		h := start(t, testConfig(a, b))
		var wg sync.WaitGroup
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < 10; j++ {
					req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/chat/completions", strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":8}`))
					req.Header.Set("X-Session-ID", fmt.Sprint("c", i))
					resp, err := h.client.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
		}
		wg.Wait()
		// The handler releases its in-flight accounting when it returns, which
		// can be just after the client has read the last byte: poll briefly.
		deadline := time.Now().Add(5 * time.Second)
		for {
			leak := false
			for _, v := range h.r.Replicas() {
				leak = leak || v.InflightRequests != 0 || v.InflightTokens != 0
			}
			if !leak {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("in-flight leak %+v", h.r.Replicas())
			}
			time.Sleep(5 * time.Millisecond)
		}
		total := 0
		for _, v := range h.r.Replicas() {
			total += v.Sessions
		}
		if total != 16 {
			t.Fatalf("sessions %d, want 16", total)
		}
	})
}

func TestPassiveFailureMarksUnhealthy(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		dead := deadURL(t)
		good := routertest.Named(t, "good", nil)
		cfg := DefaultConfig()
		cfg.MetricsInterval = 0
		cfg.HealthInterval = time.Hour // probes never run in this test: only passive detection
		cfg.Policy.FailThreshold = 2
		cfg.Replicas = []string{dead, good.URL}
		cfg.Policy.Policy = policy.RoundRobin
		h := start(t, cfg)
		for i := 0; i < 6; i++ {
			if body := readAll(t, h.post("/v1/completions", "", "{}")); body != "good" {
				t.Fatalf("request %d: %q", i, body)
			}
		}
		for _, v := range h.r.Replicas() {
			if v.URL == dead && v.Healthy {
				t.Fatal("connection failures did not mark the replica unhealthy")
			}
		}
		// Once unhealthy it is skipped: no further retries were needed.
		if got := testutil.ToFloat64(h.r.metrics.retries.WithLabelValues("connect")); got != 2 {
			t.Fatalf("retries %v, want exactly FailThreshold = 2", got)
		}
	})
}

// TestBodySessionKeysOverHTTP: the proxy reads body keys by vllm-router's
// rules (vllm-project/router src/policies/hash_key.rs): a null user is the
// key "null", an empty user ends the search (the request is untracked,
// session_id is not used), a nested session_params.session_id wins.
func TestBodySessionKeysOverHTTP(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		a, b := routertest.Named(t, "a", nil), routertest.Named(t, "b", nil)
		h := start(t, testConfig(a, b))
		for _, tc := range []struct{ body, tracked, untracked string }{
			{`{"prompt":"x","user":null,"session_id":"s1"}`, "null", "s1"},
			{`{"prompt":"x","user":"","session_id":"s2"}`, "", "s2"},
			{`{"prompt":"x","session_id":"s3","session_params":{"session_id":9}}`, "9", "s3"},
		} {
			readAll(t, h.post("/v1/completions", "", tc.body))
			if tc.tracked != "" {
				if _, ok := h.r.Lookup(tc.tracked); !ok {
					t.Errorf("%s: session %q not tracked", tc.body, tc.tracked)
				}
			}
			if _, ok := h.r.Lookup(tc.untracked); ok {
				t.Errorf("%s: session %q tracked", tc.body, tc.untracked)
			}
		}
		if n := h.r.SessionCount(); n != 2 {
			t.Fatalf("%d sessions, want 2 (null, 9)", n)
		}
	})
}

// deadURL is the URL of a loopback port nobody listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "http://" + l.Addr().String()
}

// A replica that breaks off inside its answer's head has sent the client
// nothing yet: the request is retried on another replica (forward's rule
// for a failed send), on every front.
func TestReplicaDiesInsideAnswerHead(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		broken := routertest.Backend(t, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/health" {
				return
			}
			_, _ = io.Copy(io.Discard, r.Body)
			c, bw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = bw.WriteString("HTTP/1.1 200 OK\r\nContent-Le")
			_ = bw.Flush()
			_ = c.Close()
		})
		good := routertest.Named(t, "good", nil)
		cfg := DefaultConfig()
		cfg.HealthInterval, cfg.MetricsInterval = 0, 0
		cfg.Replicas = []string{broken.URL, good.URL}
		cfg.Policy.Policy = policy.RoundRobin
		h := start(t, cfg)
		for i := range 2 { // round robin: one of the two starts on the broken replica
			resp := h.post("/v1/completions", "", `{}`)
			if body := readAll(t, resp); resp.StatusCode != http.StatusOK || body != "good" {
				t.Fatalf("request %d: %d %q, want the good replica's answer", i, resp.StatusCode, body)
			}
		}
		if got := testutil.ToFloat64(h.r.metrics.retries.WithLabelValues("connect")); got < 1 {
			t.Fatalf("retries %v: the broken replica's failure was not retried", got)
		}
	})
}

// Serve returns once Shutdown has stopped the front, even while a
// request still waits on a replica that never answers (the connection
// drains in the background, as the fast front's goroutines do).
func TestServeReturnsAfterShutdownWithRequestInFlight(t *testing.T) {
	fastFronts(t, func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		stuck := routertest.Backend(t, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/health" {
				return
			}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		cfg := testConfig(stuck)
		cfg.Front = frontOf(t)
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- r.Serve(ln) }()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		routertest.Send(t, c, routertest.RawPost("s", "x"))
		time.Sleep(50 * time.Millisecond) // the request is with the replica
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if err := r.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown = %v, want the deadline (a request in flight)", err)
		}
		select {
		case err := <-served:
			if !errors.Is(err, http.ErrServerClosed) {
				t.Fatalf("Serve = %v", err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("Serve still running 2 s after Shutdown returned")
		}
	})
}
