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
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/router/routertest"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Admission and the overhead clock follow one rule on every front
// (front's doc.go): a request is admitted or refused once its head is in,
// before its size, body or anything else about it is looked at; the
// overhead clock starts once its body is in.

// dialRaw opens a raw connection to h's router.
func dialRaw(t *testing.T, h *harness) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}

func (h *harness) admitted() int {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	return h.r.inflight
}

func (h *harness) closing() bool {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	return h.r.closing
}

// shuttingDown serves a router (cfg from tune) whose Shutdown has begun
// and waits on one request held on its replica; hits counts the other
// requests the replica got. finish releases the held request and checks
// that it was answered and that Shutdown returned.
func shuttingDown(t *testing.T, tune func(*Config)) (h *harness, hits *atomic.Int64, finish func()) {
	t.Helper()
	hits = new(atomic.Int64)
	release, held := make(chan struct{}), make(chan struct{})
	a := routertest.Backend(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get("X-Session-ID") == "held" {
			close(held)
			<-release
		} else {
			hits.Add(1)
		}
		fmt.Fprint(w, "a")
	})
	cfg := testConfig(a)
	tune(&cfg)
	h = start(t, cfg)
	heldAnswer := make(chan string, 1)
	go func() {
		resp, err := h.client.Do(mustRequest(t, h.url, "held", "{}"))
		if err != nil {
			heldAnswer <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		heldAnswer <- fmt.Sprintf("%d %s", resp.StatusCode, b)
	}()
	<-held
	shut := make(chan error, 1)
	go func() { shut <- h.r.Shutdown(context.Background()) }()
	routertest.Eventually(t, "Shutdown begun", h.closing)
	return h, hits, func() {
		t.Helper()
		close(release)
		if got := <-heldAnswer; got != "200 a" {
			t.Errorf("the request held through Shutdown got %q, want 200 a", got)
		}
		if err := <-shut; err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	}
}

func mustRequest(t *testing.T, url, session, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Session-ID", session)
	return req
}

// A router shutting down refuses every new proxied request alike on
// every front — whatever its size, body or framing — with 503,
// Retry-After (Config.RetryAfter) and Connection: close, so a client
// retries it on a fresh connection (which a balancer can place on
// another router) instead of on this one: the refusal comes before the
// size check (413) or a look at the body. The admin API stays reachable.
// (The loop front checked the size first and answered an oversized
// request 413; no front sent Retry-After; the fast and net/http fronts
// kept the connection open for more 503s.)
func TestShutdownRefusesBeforeLookingAtTheRequest(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		h, hits, finish := shuttingDown(t, func(cfg *Config) {
			cfg.MaxBodyBytes = 1024
			cfg.RetryAfter = 3 * time.Second
		})
		defer finish()
		for _, tc := range []struct{ name, raw string }{
			{"plain", routertest.RawPost("s", `{"prompt":"hi"}`)},
			{"oversized", routertest.RawPost("s", `{"prompt":"`+strings.Repeat("x", 4096)+`"}`)},
			{"malformed JSON", routertest.RawPost("s", `{"prompt": "unterminated`)},
			{"chunked", "POST /v1/completions HTTP/1.1\r\nHost: r\r\nX-Session-ID: s\r\nTransfer-Encoding: chunked\r\n\r\n" +
				"5\r\nhello\r\n0\r\n\r\n"},
		} {
			c, br := dialRaw(t, h)
			routertest.Send(t, c, tc.raw)
			resp, body := routertest.ReadResp(t, br)
			var e struct {
				Error struct {
					Code int `json:"code"`
				} `json:"error"`
			}
			_ = json.Unmarshal([]byte(body), &e)
			if resp.StatusCode != http.StatusServiceUnavailable || e.Error.Code != 503 || !strings.Contains(body, "shutting down") {
				t.Errorf("%s request while shutting down: %d %q, want 503 router is shutting down", tc.name, resp.StatusCode, body)
			}
			if got := resp.Header.Get("Retry-After"); got != "3" {
				t.Errorf("%s request while shutting down: Retry-After %q, want 3 (Config.RetryAfter)", tc.name, got)
			}
			if !resp.Close {
				t.Errorf("%s request while shutting down: the connection stays open (no Connection: close)", tc.name)
			}
		}
		if n := hits.Load(); n != 0 {
			t.Errorf("%d refused requests reached the replica", n)
		}
		if got := testutil.ToFloat64(h.r.metrics.errors.WithLabelValues("", "shutting_down")); got != 4 {
			t.Errorf("errors_total{kind=shutting_down} = %v after 4 refused requests, want 4", got)
		}
		req, _ := http.NewRequest(http.MethodGet, h.url+"/admin/replicas", nil)
		resp, err := h.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("admin API while shutting down: %d, want 200", resp.StatusCode)
		}
	})
}

// A request whose head came in before Shutdown began is admitted then —
// Shutdown waits for it, its body included — on every front. (The loop
// front admitted a request only once its body was in: one whose body
// was still coming when Shutdown began got 503, and Shutdown did not
// wait for it.)
func TestAdmittedOnceItsHeadIsIn(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		h := start(t, testConfig(routertest.Named(t, "a", nil)))
		c, br := dialRaw(t, h)
		body := `{"prompt":"hello"}`
		routertest.Send(t, c, fmt.Sprintf("POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Length: %d\r\n\r\n%s", len(body), body[:5]))
		routertest.Eventually(t, "the request admitted on its head", func() bool { return h.admitted() == 1 })
		shut := make(chan error, 1)
		go func() { shut <- h.r.Shutdown(context.Background()) }()
		routertest.Eventually(t, "Shutdown begun", h.closing)
		select {
		case err := <-shut:
			t.Fatalf("Shutdown returned (%v) while an admitted request's body was coming", err)
		default:
		}
		routertest.Send(t, c, body[5:])
		if resp, got := routertest.ReadResp(t, br); resp.StatusCode != http.StatusOK || got != "a" {
			t.Fatalf("the admitted request got %d %q, want 200 a", resp.StatusCode, got)
		}
		if err := <-shut; err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	})
}

// overheadSum is the overhead histogram's count and sum (seconds).
func overheadSum(t *testing.T, h *harness) (uint64, float64) {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "asyncrl_router_overhead_seconds" {
			hist := mf.GetMetric()[0].GetHistogram()
			return hist.GetSampleCount(), hist.GetSampleSum()
		}
	}
	return 0, 0
}

// The overhead clock starts once the request's body is in, on every
// front: a client's upload is not time the router adds (as the replica's
// answer is not), so a client that stalls inside its body does not show
// as router overhead. The check is causal, not a speed: everything the
// clock may count happens after the client sent the body's last part
// and before it read the answer, so the overhead observed is at most
// that round trip; a clock started at the head also counts the stall
// before it, which is longer than the round trip. (The fast and net/http
// fronts started it at the head, the loop front once the body was in.)
func TestOverheadExcludesClientUpload(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		h := start(t, testConfig(routertest.Named(t, "a", nil)))
		c, br := dialRaw(t, h)
		body := `{"prompt":"` + strings.Repeat("x", 200) + `"}`
		routertest.Send(t, c, fmt.Sprintf("POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Length: %d\r\n\r\n%s", len(body), body[:10]))
		time.Sleep(300 * time.Millisecond) // the client's upload stalls (the stimulus, not a wait)
		sent := time.Now()
		routertest.Send(t, c, body[10:])
		resp, got := routertest.ReadResp(t, br)
		roundTrip := time.Since(sent)
		if resp.StatusCode != http.StatusOK || got != "a" {
			t.Fatalf("answer %d %q", resp.StatusCode, got)
		}
		routertest.Eventually(t, "the request's overhead observed", func() bool { n, _ := overheadSum(t, h); return n == 1 })
		if _, sum := overheadSum(t, h); sum > roundTrip.Seconds() {
			t.Fatalf("overhead %.3f s > %.3f s from the body's last part to the answer: the client's upload was counted",
				sum, roundTrip.Seconds())
		}
	})
}

// A request admitted on its head whose client goes away inside the body
// is ended (Leave) on every front, and so is one whose body never comes
// when Shutdown gives up waiting for it — a plain body and a chunked one
// (which every front hands to net/http): the fast fronts cut theirs when
// they stop, and net/http's servers are closed once their Shutdown gave
// up (its Shutdown alone left a connection being read open, admitted).
func TestAdmittedRequestEndsWithItsConnection(t *testing.T) {
	partial := "POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Length: 100\r\n\r\n{\"prompt\":"
	chunked := "POST /v1/completions HTTP/1.1\r\nHost: r\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"pro\r\n"
	for _, body := range []struct{ name, raw string }{{"plain", partial}, {"chunked", chunked}} {
		t.Run(body.name, func(t *testing.T) { admittedEndsWithConnection(t, body.raw) })
	}
}

func admittedEndsWithConnection(t *testing.T, partial string) {
	eachFront(t, func(t *testing.T) {
		h := start(t, testConfig(routertest.Named(t, "a", nil)))
		c, _ := dialRaw(t, h)
		routertest.Send(t, c, partial)
		routertest.Eventually(t, "the request admitted on its head", func() bool { return h.admitted() == 1 })
		_ = c.Close()
		routertest.Eventually(t, "the request ended with its connection", func() bool { return h.admitted() == 0 })
		c2, br := dialRaw(t, h)
		routertest.Send(t, c2, partial)
		routertest.Eventually(t, "the request admitted on its head", func() bool { return h.admitted() == 1 })
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if err := h.r.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown = %v, want its deadline (a body still coming)", err)
		}
		if _, err := br.ReadByte(); err == nil {
			t.Fatal("the connection of a request Shutdown gave up on stays open")
		}
		routertest.Eventually(t, "the cut request ended", func() bool { return h.admitted() == 0 })
	})
}
