package front_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/router/front"
	"github.com/asyncrl/asyncrl/actors/router/routertest"
)

// Tests of the fronts that read HTTP/1.1 themselves (fast and loop);
// the router's behaviour tests (package proxy) run against every front.

// echo answers with the request's session header and body; slow makes it
// wait longer than front.WatchDelay first, so the disconnect watch runs.
func echo(t *testing.T, slow time.Duration) *harness { return idleEcho(t, slow, 0) }

// Pipelined requests on one connection are answered in order, also when
// the disconnect watch's background read takes the first byte of the
// next request while the replica works (it must be kept).
func TestFrontPipelined(t *testing.T) {
	fastFronts(t, func(t *testing.T) {
		for _, slow := range []time.Duration{0, 3 * front.WatchDelay} {
			h := echo(t, slow)
			c, br := h.dial()
			routertest.Send(t, c, routertest.RawPost("a", `{"n":1}`)+routertest.RawPost("b", `{"n":2}`)+routertest.RawPost("c", `{"n":3}`))
			for _, want := range []string{`a:{"n":1}`, `b:{"n":2}`, `c:{"n":3}`} {
				resp, body := routertest.ReadResp(t, br)
				if resp.StatusCode != 200 || body != want || resp.Header.Get(front.ReplicaHeader) == "" {
					t.Fatalf("slow %v: %d %q, want %q", slow, resp.StatusCode, body, want)
				}
			}
			// Sent one at a time after slow answers, each request is whole too.
			for i := range 3 {
				routertest.Send(t, c, routertest.RawPost("d", fmt.Sprint(i)))
				if _, body := routertest.ReadResp(t, br); body != fmt.Sprintf("d:%d", i) {
					t.Fatalf("slow %v: request %d: %q", slow, i, body)
				}
			}
		}
	})
}

// What the fast front does not serve goes to net/http on the same
// connection, which serves it or writes its own error.
func TestFrontHandOff(t *testing.T) {
	fastFronts(t, func(t *testing.T) {
		h := echo(t, 0)
		cases := []struct {
			name, req string
			code      int
			body      string
		}{
			{"chunked body", "POST /v1/completions HTTP/1.1\r\nHost: r\r\nX-Session-ID: c\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 200, "c:{}"},
			{"expect", "POST /v1/completions HTTP/1.1\r\nHost: r\r\nX-Session-ID: e\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}", 200, "e:{}"},
			{"http/1.0", "POST /v1/completions HTTP/1.0\r\nHost: r\r\nX-Session-ID: o\r\nContent-Length: 2\r\n\r\n{}", 200, "o:{}"},
			{"finish_session", "POST /finish_session?session_id=o HTTP/1.1\r\nHost: r\r\n\r\n", 200, `{"released":true,"session_id":"o"}` + "\n"},
			{"garbage", "HELLO\r\n\r\n", 400, ""},
			{"no host", "GET /v1/models HTTP/1.1\r\n\r\n", 400, ""},
			{"huge head", "GET /v1/models HTTP/1.1\r\nHost: r\r\nX-Big: " + strings.Repeat("b", 2<<20) + "\r\n\r\n", 431, ""},
		}
		for _, tc := range cases {
			c, br := h.dial()
			go func() { _, _ = io.WriteString(c, tc.req) }()
			resp, body := routertest.ReadResp(t, br)
			if resp.StatusCode == http.StatusContinue {
				resp, body = routertest.ReadResp(t, br)
			}
			if resp.StatusCode != tc.code || (tc.body != "" && body != tc.body) {
				t.Errorf("%s: %d %q, want %d %q", tc.name, resp.StatusCode, body, tc.code, tc.body)
			}
		}
		// After a hand-off the connection stays with net/http: a second
		// request on it is served (by net/http, through the same forward).
		c, br := h.dial()
		routertest.Send(t, c, "GET /admin/replicas HTTP/1.1\r\nHost: r\r\n\r\n"+routertest.RawPost("z", "{}"))
		if resp, body := routertest.ReadResp(t, br); resp.StatusCode != 200 || !strings.Contains(body, `"replicas"`) {
			t.Fatalf("admin: %d %q", resp.StatusCode, body)
		}
		if resp, body := routertest.ReadResp(t, br); resp.StatusCode != 200 || body != "z:{}" {
			t.Fatalf("after the hand-off: %d %q", resp.StatusCode, body)
		}
	})
}

// /admin/ with a token set is handed off and checked by net/http's handler.
func TestFrontAdminToken(t *testing.T) {
	fastFronts(t, func(t *testing.T) {
		cfg := testConfig(routertest.Named(t, "a", nil))
		cfg.AdminToken = "tok"
		h := start(t, cfg)
		for _, tc := range []struct {
			auth string
			code int
		}{{"", 401}, {"Authorization: Bearer tok\r\n", 200}} {
			c, br := h.dial()
			routertest.Send(t, c, "GET /admin/replicas HTTP/1.1\r\nHost: r\r\n"+tc.auth+"\r\n")
			if resp, _ := routertest.ReadResp(t, br); resp.StatusCode != tc.code {
				t.Fatalf("auth %q: %d, want %d", tc.auth, resp.StatusCode, tc.code)
			}
		}
	})
}

// Connection: close is honoured: the answer says so and the connection ends.
func TestFrontConnectionClose(t *testing.T) {
	fastFronts(t, func(t *testing.T) {
		h := echo(t, 0)
		c, br := h.dial()
		req := "POST /v1/completions HTTP/1.1\r\nHost: r\r\nX-Session-ID: k\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}"
		routertest.Send(t, c, req)
		resp, body := routertest.ReadResp(t, br)
		if body != "k:{}" || !resp.Close {
			t.Fatalf("%q close %v", body, resp.Close)
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Fatalf("connection still open: %v", err)
		}
	})
}

// A client that goes away while a non-streaming request waits on the
// replica (no byte of the answer yet) cancels the upstream request: the
// disconnect watch's background read sees the close.
func TestFrontDisconnectWhileWaiting(t *testing.T) {
	fastFronts(t, func(t *testing.T) {
		entered, cancelled := make(chan struct{}), make(chan struct{})
		a := routertest.Backend(t, func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadAll(r.Body) // net/http watches for the close only after the body
			close(entered)
			select {
			case <-r.Context().Done():
				close(cancelled)
			case <-t.Context().Done(): // the test failed: let cleanup end
			}
		})
		h := start(t, testConfig(a))
		c, _ := h.dial()
		routertest.Send(t, c, routertest.RawPost("w", "{}"))
		<-entered
		c.Close()
		select {
		case <-cancelled:
		case <-time.After(5 * time.Second):
			t.Fatal("the replica never saw the cancellation")
		}
		routertest.Eventually(t, "in-flight released", func() bool { return h.r.Replicas()[0].InflightRequests == 0 })
	})
}

// A replica that dies inside a declared-length answer aborts the client
// connection: the client reads an error, not a clean short body.
// (Both fronts: the answer is read by the lean reader, upstream/conn.go readLean.)
func TestUpstreamDiesInKnownLength(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		a := routertest.Backend(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "100")
			_, _ = io.WriteString(w, "0123456789")
			w.(http.Flusher).Flush()
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
		})
		h := start(t, testConfig(a))
		c, br := h.dial()
		routertest.Send(t, c, routertest.RawPost("d", "{}"))
		resp, err := http.ReadResponse(br, nil)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
		}
		if err == nil {
			t.Fatal("client got a clean answer from a replica that died mid-body")
		}
	})
}

// A body over MaxBodyBytes gets 413 without being read, and the
// connection closes (its unread body cannot be skipped).
func TestFrontTooLarge(t *testing.T) {
	fastFronts(t, func(t *testing.T) {
		cfg := testConfig(routertest.Named(t, "a", nil))
		cfg.MaxBodyBytes = 10
		h := start(t, cfg)
		c, br := h.dial()
		routertest.Send(t, c, routertest.RawPost("l", strings.Repeat("x", 11)))
		resp, body := routertest.ReadResp(t, br)
		if resp.StatusCode != 413 || !resp.Close || !strings.Contains(body, "exceeds 10 bytes") {
			t.Fatalf("%d close %v %q", resp.StatusCode, resp.Close, body)
		}
	})
}

// idleEcho is echo with the fast front's IdleTimeout set to idle (0: the
// default).
func idleEcho(t *testing.T, slow, idle time.Duration) *harness {
	a := routertest.Backend(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		time.Sleep(slow)
		fmt.Fprintf(w, "%s:%s", r.Header.Get("X-Session-ID"), b)
	})
	cfg := testConfig(a)
	cfg.IdleTimeout = idle
	return start(t, cfg)
}

// expectClosed reads from c until the router closes it (EOF), failing
// when the 5 s deadline dial set passes first.
func expectClosed(t *testing.T, br *bufio.Reader, what string) {
	t.Helper()
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("%s: read %v; want the router to close the connection (EOF)", what, err)
	}
}

// A keep-alive connection idle past IdleTimeout, and one trickling a
// head for longer, are closed by the fast front.
func TestFrontIdleTimeout(t *testing.T) {
	fastFronts(t, func(t *testing.T) {
		h := idleEcho(t, 0, 100*time.Millisecond)
		c, br := h.dial()
		routertest.Send(t, c, routertest.RawPost("s1", "hi"))
		if resp, body := routertest.ReadResp(t, br); resp.StatusCode != http.StatusOK || body != "s1:hi" {
			t.Fatalf("answer %d %q", resp.StatusCode, body)
		}
		expectClosed(t, br, "idle keep-alive connection")

		c2, br2 := h.dial()
		if _, err := io.WriteString(c2, "POST /v1/completions HTTP/1.1\r\nHost: r\r\n"); err != nil {
			t.Fatal(err)
		}
		expectClosed(t, br2, "half-sent head")
	})
}

// A request waiting on its replica far longer than IdleTimeout is never
// cut: the timeout covers waiting for a head, not serving one (a
// generation may take minutes).
func TestFrontIdleTimeoutSparesServedRequests(t *testing.T) {
	fastFronts(t, func(t *testing.T) {
		h := idleEcho(t, 500*time.Millisecond, 50*time.Millisecond)
		c, br := h.dial()
		for i := range 2 {
			routertest.Send(t, c, routertest.RawPost("s", fmt.Sprint(i)))
			if resp, body := routertest.ReadResp(t, br); resp.StatusCode != http.StatusOK || body != fmt.Sprintf("s:%d", i) {
				t.Fatalf("request %d: answer %d %q", i, resp.StatusCode, body)
			}
		}
	})
}
