// Package routertest holds the test helpers the router's packages share
// (actors/router/proxy's tests and actors/router/front's): real backends
// on httptest servers, raw HTTP/1.1 requests and answers, and a poll with
// a deadline. Tests only; it imports the standard library alone, so the
// proxy's own (internal) tests can use it without an import cycle.
package routertest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// Backend is an httptest server running f, closed when t ends.
func Backend(t testing.TB, f http.HandlerFunc) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(f)
	t.Cleanup(s.Close)
	return s
}

// Named is a backend that answers every request but GET /health with its
// name, counting them in hits (when not nil).
func Named(t testing.TB, name string, hits *atomic.Int64) *httptest.Server {
	return Backend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		if hits != nil {
			hits.Add(1)
		}
		_, _ = io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, name)
	})
}

// Eventually polls cond every 5 ms and fails t after 5 s.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Send writes raw request bytes on c.
func Send(t testing.TB, c net.Conn, raw string) {
	t.Helper()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
}

// RawPost is a POST /v1/completions of body in session, as raw bytes.
func RawPost(session, body string) string {
	return fmt.Sprintf("POST /v1/completions HTTP/1.1\r\nHost: r\r\nX-Session-ID: %s\r\nContent-Length: %d\r\n\r\n%s", session, len(body), body)
}

// ReadResp reads one answer from br and its whole body.
func ReadResp(t testing.TB, br *bufio.Reader) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}
