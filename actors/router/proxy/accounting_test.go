package proxy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/actors/router/routertest"
)

// overheadCount is how many requests the overhead histogram observed.
func overheadCount(t *testing.T, h *harness) uint64 {
	t.Helper()
	n, _ := overheadSum(t, h)
	return n
}

// A replica that dies inside its answer's body (after a whole head with
// a Content-Length) is accounted for alike on every front, as forward's
// relay does it: the answer counted by its status code and its overhead
// observed (the head was in), one upstream_stream error, the replica's
// load released; the client never sees a whole answer. (The loop front,
// which buffers such an answer before writing anything, counted only the
// error: its requests_total and overhead missed every such answer.)
func TestReplicaDiesInsideAnswerBodyAccounting(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		a := routertest.Backend(t, func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			c, bw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = bw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"partial\":")
			_ = bw.Flush()
			_ = c.Close() // the engine dies mid-answer
		})
		h := start(t, testConfig(a))
		c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		routertest.Send(t, c, routertest.RawPost("s", `{"prompt":"p"}`))
		got, err := io.ReadAll(c) // the router cuts the connection
		if err != nil {
			t.Fatalf("reading until the router closes: %v (got %q)", err, got)
		}
		if resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(got)), nil); err == nil {
			if _, err := io.ReadAll(resp.Body); err == nil {
				t.Fatalf("client got a whole answer from a cut one: %q", got)
			}
		}
		routertest.Eventually(t, "in-flight released", func() bool { return h.r.Replicas()[0].InflightRequests == 0 })
		if got := testutil.ToFloat64(h.r.metrics.errors.WithLabelValues(a.URL, "upstream_stream")); got != 1 {
			t.Errorf("upstream_stream errors = %v, want 1", got)
		}
		if got := testutil.ToFloat64(h.r.metrics.requests.WithLabelValues(a.URL, "200")); got != 1 {
			t.Errorf("requests_total{code=200} = %v, want 1 (the answer's head was in)", got)
		}
		if n := overheadCount(t, h); n != 1 {
			t.Errorf("overhead observations = %d, want 1", n)
		}
	})
}

// decisionsTotal sums the router's routing decisions over outcomes.
func decisionsTotal(t *testing.T, h *harness) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == "asyncrl_router_decisions_total" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// A replica the lean upstream client does not serve (its URL has a path:
// the Transport sends to it) is routed once per request on every front,
// as forward routes it: one decision, one admission. (The loop front
// routed it, handed the connection to the goroutine path, which routed it
// again: two decisions, and the retry budget earned twice.)
func TestNonPlainReplicaRoutedOnce(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		var mu sync.Mutex
		var paths []string
		a := routertest.Backend(t, func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			mu.Lock()
			defer mu.Unlock()
			paths = append(paths, r.URL.Path)
			_, _ = io.WriteString(w, "ok")
		})
		h := start(t, testConfig())
		if err := h.r.Apply(policy.AddReplica{URL: a.URL + "/base"}); err != nil {
			t.Fatal(err)
		}
		for i := range 3 { // one keep-alive connection: it goes on after each
			resp := h.post("/v1/completions", "s", `{"prompt":"p"}`)
			if body := readAll(t, resp); resp.StatusCode != 200 || body != "ok" {
				t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(paths) != 3 || paths[0] != "/base/v1/completions" {
			t.Fatalf("replica saw %q", paths)
		}
		if n := decisionsTotal(t, h); n != 3 {
			t.Fatalf("%v routing decisions for three requests, want 3", n)
		}
	})
}

// A plain replica's 503 is retried onto a replica that is not plain on
// every front: the loop front hands forward's loop the retry's decision
// (its attempt index and the request's Avoid list with it).
func TestRetry503OntoNonPlainReplica(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		var badHits atomic.Int64
		bad := routertest.Backend(t, func(w http.ResponseWriter, r *http.Request) {
			badHits.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
		})
		good := routertest.Named(t, "good", nil)
		cfg := testConfig(bad)
		cfg.Policy.Policy = policy.RoundRobin
		h := start(t, cfg)
		if err := h.r.Apply(policy.AddReplica{URL: good.URL + "/base"}); err != nil {
			t.Fatal(err)
		}
		answeredByGoodAfter503s(t, h, &badHits)
		if n := decisionsTotal(t, h); n != float64(4+badHits.Load()) {
			t.Fatalf("%v routing decisions for 4 requests and %d retries", n, badHits.Load())
		}
	})
}

// A client that goes away inside its request's body is counted
// (read_body) on every front, as net/http's front and the fast one count
// it. (The loop front closed the connection and counted nothing.)
func TestClientGoneMidBodyCounted(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		a := routertest.Named(t, "a", nil)
		h := start(t, testConfig(a))
		c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		// The head and part of the body, then the close: the router reads
		// them in that order whatever its timing.
		routertest.Send(t, c, "POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Length: 100\r\n\r\n{\"prompt\":")
		_ = c.Close()
		routertest.Eventually(t, "read_body counted", func() bool {
			return testutil.ToFloat64(h.r.metrics.errors.WithLabelValues("", "read_body")) == 1
		})
	})
}

// A 503 that the loop front does not relay itself (chunked here: no
// Content-Length) is retried on another replica like any 503, on every
// front. (The loop handed it to its relay goroutine, which relayed it.)
func TestRetryChunked503(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		var badHits atomic.Int64
		bad := routertest.Backend(t, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/health" {
				return
			}
			badHits.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
			w.(http.Flusher).Flush() // chunked
			_, _ = io.WriteString(w, `{"error":"busy"}`)
		})
		good := routertest.Named(t, "good", nil)
		cfg := testConfig(bad, good)
		cfg.Policy.Policy = policy.RoundRobin
		h := start(t, cfg)
		answeredByGoodAfter503s(t, h, &badHits)
	})
}

// A replica whose answer head is whole but unreadable has sent the client
// nothing: the request is retried on another replica (forward's rule for
// a failed send), on every front. (The loop handed such a head to its
// relay goroutine, which answered 502 without a retry.)
func TestRetryGarbledAnswerHead(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		var brokenHits atomic.Int64
		broken := routertest.Backend(t, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/health" {
				return
			}
			brokenHits.Add(1)
			_, _ = io.Copy(io.Discard, r.Body)
			c, bw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = bw.WriteString("HTTP/1.1 2x0 OK\r\nContent-Length: 2\r\n\r\nok")
			_ = bw.Flush()
			_ = c.Close()
		})
		good := routertest.Named(t, "good", nil)
		cfg := testConfig(broken, good)
		cfg.Policy.Policy = policy.RoundRobin
		h := start(t, cfg)
		for i := range 2 { // round robin: one of the two starts on the broken replica
			resp := h.post("/v1/completions", "", `{}`)
			if body := readAll(t, resp); resp.StatusCode != http.StatusOK || body != "good" {
				t.Fatalf("request %d: %d %q, want the good replica's answer", i, resp.StatusCode, body)
			}
		}
		if n := brokenHits.Load(); n == 0 || testutil.ToFloat64(h.r.metrics.retries.WithLabelValues("connect")) != float64(n) {
			t.Fatalf("connect retries %v, broken replica's answers %d: want one retry each",
				testutil.ToFloat64(h.r.metrics.retries.WithLabelValues("connect")), n)
		}
	})
}

// answeredByGoodAfter503s sends 4 requests through h, each answered 200
// "good", and checks the 503 replica was tried (badHits) and every try of
// it counted as a status_503 retry.
func answeredByGoodAfter503s(t *testing.T, h *harness, badHits *atomic.Int64) {
	t.Helper()
	for i := range 4 {
		resp := h.post("/v1/completions", "", `{"prompt":"p"}`)
		if body := readAll(t, resp); resp.StatusCode != 200 || body != "good" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
	}
	if badHits.Load() == 0 {
		t.Fatal("the 503 replica was never tried; the test proves nothing")
	}
	if got := testutil.ToFloat64(h.r.metrics.retries.WithLabelValues("status_503")); got != float64(badHits.Load()) {
		t.Fatalf("status_503 retries %v, bad hits %d", got, badHits.Load())
	}
}
