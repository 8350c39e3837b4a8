package upstream

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// headers is a HeaderWriter over fixed lines.
type headers []string

func (h headers) WriteHeaders(w *bufio.Writer) {
	for _, l := range h {
		w.WriteString(l)
		w.WriteString("\r\n")
	}
}

// rawReplica answers each connection's requests with answer(req), up to
// perConn requests, then closes the connection without a word (a replica
// closing an idle keep-alive connection). It counts connections and
// records the last request.
type rawReplica struct {
	host  string
	conns atomic.Int64
	last  atomic.Pointer[http.Request]
}

func newRawReplica(t *testing.T, perConn int, answer func(req *http.Request, body string) string) *rawReplica {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &rawReplica{host: ln.Addr().String()}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.conns.Add(1)
			go r.serve(c, perConn, answer)
		}
	}()
	return r
}

func (r *rawReplica) serve(c net.Conn, perConn int, answer func(*http.Request, string) string) {
	defer c.Close()
	br := bufio.NewReader(c)
	for range perConn {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		b, _ := io.ReadAll(req.Body)
		r.last.Store(req)
		if _, err := io.WriteString(c, answer(req, string(b))); err != nil {
			return
		}
	}
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	if err := resp.Body.Close(); err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func newClient(t *testing.T) *Client {
	c := New()
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// Sequential requests reuse one pooled connection; the request carries
// the caller's headers, Host and the body with its length.
func TestRoundTripReusesConnection(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, r.Method+" "+r.URL.RequestURI()+" "+r.Host+" "+r.Header.Get("X-Keep")+" "+string(b))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	u := newClient(t)
	for i := range 20 {
		resp, err := u.RoundTrip(context.Background(), http.MethodPost, host, "/v1/completions?x=1", headers{"X-Keep: k"}, []byte(`{"n":1}`))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		want := "POST /v1/completions?x=1 " + host + ` k {"n":1}`
		if got := readBody(t, resp); resp.StatusCode != 200 || got != want {
			t.Fatalf("request %d: %d %q, want 200 %q", i, resp.StatusCode, got, want)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for 20 sequential requests, want 1", n)
	}
}

// A pooled connection the replica closed is replayed once, with the same
// body, on a fresh connection: the caller sees only the answer.
func TestRoundTripReplaysOnClosedIdleConnection(t *testing.T) {
	r := newRawReplica(t, 1, func(_ *http.Request, body string) string {
		return "HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	})
	u := newClient(t)
	for i := range 4 {
		resp, err := u.RoundTrip(context.Background(), http.MethodPost, r.host, "/", headers{}, []byte("body"))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if got := readBody(t, resp); got != "body" {
			t.Fatalf("request %d: %q", i, got)
		}
	}
	if n := r.conns.Load(); n != 4 {
		t.Fatalf("%d connections for 4 requests on a one-request-per-connection replica, want 4", n)
	}
}

// A fresh connection that fails before answering is not replayed: the
// error is ErrNoAnswer, for the caller's retry rule.
func TestRoundTripFreshConnectionFailureIsReturned(t *testing.T) {
	r := newRawReplica(t, 0, nil) // accepts, reads nothing, closes
	_, err := newClient(t).RoundTrip(context.Background(), http.MethodGet, r.host, "/", headers{}, nil)
	if !errors.Is(err, ErrNoAnswer) {
		t.Fatalf("error %v, want ErrNoAnswer", err)
	}
	if n := r.conns.Load(); n != 1 {
		t.Fatalf("%d connections, want 1 (no replay on a fresh connection)", n)
	}
}

// Interim answers are skipped (through net/http); a plain Content-Length
// answer is read lean (no header map until Header asks), with its head in
// LeanHead.
func TestInterimSkippedAndLeanHead(t *testing.T) {
	const final = "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nX-Engine: e1\r\nContent-Length: 4\r\n\r\nmade"
	for _, tc := range []struct {
		name   string
		answer string
		lean   bool
	}{
		{"interim first", "HTTP/1.1 100 Continue\r\n\r\n" + final, false},
		{"plain", final, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRawReplica(t, 10, func(*http.Request, string) string { return tc.answer })
			resp, err := newClient(t).RoundTrip(context.Background(), http.MethodPost, r.host, "/", headers{}, []byte("x"))
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 201 || resp.Status != "201 Created" || resp.ContentLength != 4 {
				t.Fatalf("answer %d %q length %d", resp.StatusCode, resp.Status, resp.ContentLength)
			}
			if lean := resp.Header == nil && LeanHead(resp) != nil; lean != tc.lean {
				t.Fatalf("read lean: %v, want %v (header map %v)", lean, tc.lean, resp.Header)
			}
			if IsSSE(resp) {
				t.Fatal("application/json taken for an event stream")
			}
			if h := Header(resp); h.Get("X-Engine") != "e1" || h.Get("Content-Type") != "application/json" {
				t.Fatalf("Header built %v", h)
			}
			if got := readBody(t, resp); got != "made" {
				t.Fatalf("body %q", got)
			}
		})
	}
}

// Answers a lean read leaves to net/http (chunked, an event stream) come
// whole, and IsSSE sees the event stream either way.
func TestChunkedEventStream(t *testing.T) {
	r := newRawReplica(t, 10, func(*http.Request, string) string {
		return "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"6\r\ndata: \r\n2\r\nA\n\r\n0\r\n\r\n"
	})
	resp, err := newClient(t).RoundTrip(context.Background(), http.MethodPost, r.host, "/", headers{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !IsSSE(resp) || LeanHead(resp) != nil {
		t.Fatalf("event stream: IsSSE %v, lean head %v", IsSSE(resp), LeanHead(resp))
	}
	if got := readBody(t, resp); got != "data: A\n" {
		t.Fatalf("body %q", got)
	}
}

// A replica that dies mid-answer: the body ends in io.ErrUnexpectedEOF,
// never a clean EOF, and the connection is not pooled.
func TestCutShortAnswer(t *testing.T) {
	r := newRawReplica(t, 1, func(*http.Request, string) string {
		return "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"
	})
	u := newClient(t)
	resp, err := u.RoundTrip(context.Background(), http.MethodGet, r.host, "/", headers{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(resp.Body); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("reading a cut-short body: %v, want io.ErrUnexpectedEOF", err)
	}
	resp.Body.Close()
	u.mu.Lock()
	idle := len(u.idle[r.host])
	u.mu.Unlock()
	if idle != 0 {
		t.Fatalf("%d idle connections after a failed body, want 0", idle)
	}
}

// A replica that asks to close, or a body closed before its end, does not
// leave the connection in the pool; one read to its end does.
func TestPoolOnlyCleanAnswers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer string
		read   bool
		pooled int
	}{
		{"clean", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", true, 1},
		{"close asked", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", true, 0},
		{"not read", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRawReplica(t, 10, func(*http.Request, string) string { return tc.answer })
			u := newClient(t)
			resp, err := u.RoundTrip(context.Background(), http.MethodGet, r.host, "/", headers{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.read {
				_, _ = io.ReadAll(resp.Body)
			}
			resp.Body.Close()
			u.mu.Lock()
			idle := len(u.idle[r.host])
			u.mu.Unlock()
			if idle != tc.pooled {
				t.Fatalf("%d idle connections, want %d", idle, tc.pooled)
			}
		})
	}
}

// The caller going away aborts a request the replica sits on: RoundTrip
// returns the context's cause.
func TestCancelAbortsWaitingRequest(t *testing.T) {
	release, arrived := make(chan struct{}), make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	cause := errors.New("client went away")
	ctx, cancel := context.WithCancelCause(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := newClient(t).RoundTrip(ctx, http.MethodGet, strings.TrimPrefix(srv.URL, "http://"), "/", headers{}, nil)
		errc <- err
	}()
	select {
	case <-arrived: // the request is with the replica, waiting for its answer
	case <-time.After(10 * time.Second):
		t.Fatal("the request did not reach the replica in 10 s")
	}
	cancel(cause)
	select {
	case err := <-errc:
		if !errors.Is(err, cause) {
			t.Fatalf("error %v, want the context's cause", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RoundTrip still waiting 10 s after its context ended")
	}
}

// After CloseIdleConnections nothing is pooled: a finished answer closes
// its connection.
func TestCloseIdleConnections(t *testing.T) {
	r := newRawReplica(t, 10, func(*http.Request, string) string {
		return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	})
	u := New()
	resp, err := u.RoundTrip(context.Background(), http.MethodGet, r.host, "/", headers{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	readBody(t, resp)
	u.CloseIdleConnections()
	resp, err = u.RoundTrip(context.Background(), http.MethodGet, r.host, "/", headers{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	readBody(t, resp)
	u.mu.Lock()
	idle := len(u.idle[r.host])
	u.mu.Unlock()
	if idle != 0 || r.conns.Load() != 2 {
		t.Fatalf("after CloseIdleConnections: %d idle, %d connections; want 0 idle and a new connection", idle, r.conns.Load())
	}
}
