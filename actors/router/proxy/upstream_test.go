package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// Sequential requests reuse one upstream connection (keep-alive through
// the lean client), and the answers are whole.
func TestUpstreamReusesConnections(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		var conns atomic.Int64
		a := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = io.WriteString(w, `{"ok":true}`)
		}))
		a.Config.ConnState = func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		}
		a.Start()
		t.Cleanup(a.Close)
		h := start(t, testConfig(a))
		if h.r.up == nil {
			t.Fatal("default config: the lean upstream client is not in use")
		}
		for range 50 {
			resp := h.post("/v1/completions", "s", `{"prompt":"x"}`)
			if b := readAll(t, resp); b != `{"ok":true}` {
				t.Fatalf("answer %q", b)
			}
		}
		if n := conns.Load(); n != 1 {
			t.Fatalf("%d upstream connections for 50 sequential requests, want 1", n)
		}
	})
}

// rawBackend answers each connection's requests with the given raw
// responses in turn (one per request), then closes the connection
// without a word, as a replica closing an idle keep-alive connection.
func rawBackend(t *testing.T, perConn int, answer func(req *http.Request) string) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var conns atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for range perConn {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					if _, err := io.WriteString(c, answer(req)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String(), &conns
}

// A replica that closed a pooled connection: the request is replayed
// once on a new connection, and the client sees only the answer.
func TestUpstreamReplaysOnClosedIdleConnection(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		url, conns := rawBackend(t, 1, func(*http.Request) string {
			return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
		})
		cfg := DefaultConfig()
		cfg.HealthInterval, cfg.MetricsInterval = 0, 0
		cfg.Replicas = []string{url}
		h := start(t, cfg)
		for i := range 5 {
			resp := h.post("/v1/completions", "s", `{"prompt":"x"}`)
			if b := readAll(t, resp); resp.StatusCode != 200 || b != "ok" {
				t.Fatalf("request %d: %d %q", i, resp.StatusCode, b)
			}
		}
		if n := conns.Load(); n < 5 {
			t.Fatalf("%d connections for 5 requests on a one-request-per-connection backend", n)
		}
	})
}

// Interim 1xx answers are skipped; Expect is not sent upstream (the body
// is already read); hop-by-hop request headers stay behind.
func TestUpstreamInterimAndHeaders(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		var got atomic.Value
		url, _ := rawBackend(t, 100, func(req *http.Request) string {
			got.Store(req.Header.Clone())
			return "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 4\r\n\r\nmade"
		})
		cfg := DefaultConfig()
		cfg.HealthInterval, cfg.MetricsInterval = 0, 0
		cfg.Replicas = []string{url}
		h := start(t, cfg)
		req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/completions", strings.NewReader(`{"prompt":"x"}`))
		req.Header.Set("Expect", "100-continue")
		req.Header.Set("Connection", "X-Hop")
		req.Header.Set("X-Hop", "1")
		req.Header.Set("X-Session-ID", "s")
		req.Header.Set("X-Keep", "end-to-end")
		resp, err := h.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if b := readAll(t, resp); resp.StatusCode != 201 || b != "made" {
			t.Fatalf("answer %d %q", resp.StatusCode, b)
		}
		hdr := got.Load().(http.Header)
		if hdr.Get("Expect") != "" || hdr.Get("X-Hop") != "" || hdr.Get("X-Keep") != "end-to-end" || hdr.Get("X-Session-Id") != "s" {
			t.Fatalf("upstream headers %v", hdr)
		}
	})
}
