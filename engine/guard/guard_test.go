package guard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/engine/guard"
)

func TestNewRefusesBadConfig(t *testing.T) {
	if _, err := guard.New(guard.Config{Upstream: "http://127.0.0.1:8001"}); !errors.Is(err, guard.ErrNoKey) {
		t.Errorf("no key: %v, want ErrNoKey", err)
	}
	for _, u := range []string{"", "127.0.0.1:8001", "ftp://h:1", "http://", "http://h:1/?x=1", ":8001"} {
		if _, err := guard.New(guard.Config{Upstream: u, Key: guardKey}); !errors.Is(err, guard.ErrUpstream) {
			t.Errorf("engine %q: %v, want ErrUpstream", u, err)
		}
	}
}

// An event stream reaches the caller event by event: the engine sends
// the second event only after the caller read the first through the guard,
// so a guard that buffered the answer would deadlock (caught by the
// deadline).
func TestStreamPassesIncrementally(t *testing.T) {
	readFirst := make(chan struct{})
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"n\":1}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-readFirst:
		case <-time.After(10 * time.Second):
			return
		}
		_, _ = io.WriteString(w, "data: {\"n\":2}\n\ndata: [DONE]\n\n")
	}))
	defer eng.Close()
	f := newGuard(t, guard.Config{Upstream: eng.URL, Key: guardKey})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", f.srv.URL+"/v1/completions", strings.NewReader(`{"stream":true}`))
	req.Header.Set("Authorization", "Bearer "+guardKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "data: {\"n\":1}\n" {
		t.Fatalf("first event %q %v (a guard that buffers never delivers it before the deadline)", line, err)
	}
	close(readFirst)
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "\ndata: {\"n\":2}\n\ndata: [DONE]\n\n" {
		t.Fatalf("rest %q %v", rest, err)
	}
}

// A request body streams to the engine: the engine reads the first part
// while the caller still holds the second.
func TestRequestBodyStreams(t *testing.T) {
	gotFirst := make(chan string, 1)
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 6)
		if _, err := io.ReadFull(r.Body, buf); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		gotFirst <- string(buf)
		rest, _ := io.ReadAll(r.Body)
		_, _ = w.Write(append(buf, rest...))
	}))
	defer eng.Close()
	f := newGuard(t, guard.Config{Upstream: eng.URL, Key: guardKey})

	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", f.srv.URL+"/collective_rpc", pr)
	req.Header.Set("Authorization", "Bearer "+guardKey)
	type result struct {
		body string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		done <- result{string(b), err}
	}()
	if _, err := pw.Write([]byte("part1|")); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-gotFirst:
		if s != "part1|" {
			t.Fatalf("engine read %q", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the engine never saw the first part while the caller held the rest: the guard buffers request bodies")
	}
	_, _ = pw.Write([]byte("part2"))
	_ = pw.Close()
	r := <-done
	if r.err != nil || r.body != "part1|part2" {
		t.Fatalf("answer %q %v", r.body, r.err)
	}
}

// The engine's status, headers and body come back unchanged; hop-by-hop
// headers do not cross; the caller's other headers reach the engine.
func TestAnswerPassesThrough(t *testing.T) {
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Session-ID") != "s-7" || r.Header.Get("Accept-Encoding") != "zstd" || r.Header.Get("Keep-Alive") != "" {
			http.Error(w, "headers changed: "+r.Header.Get("X-Session-ID")+"|"+r.Header.Get("Accept-Encoding")+"|"+r.Header.Get("Keep-Alive"), 500)
			return
		}
		if xff := r.Header.Get("X-Forwarded-For"); xff != "127.0.0.1" {
			http.Error(w, "X-Forwarded-For "+xff, 500)
			return
		}
		w.Header().Set("X-Engine", "vllm")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTeapot)
		_, _ = io.WriteString(w, `{"error":{"message":"short and stout","code":418}}`)
	}))
	defer eng.Close()
	f := newGuard(t, guard.Config{Upstream: eng.URL, Key: guardKey})
	req, _ := http.NewRequest("GET", f.srv.URL+"/v1/models?x=1", nil)
	req.Header.Set("Authorization", "Bearer "+guardKey)
	req.Header.Set("X-Session-ID", "s-7")
	req.Header.Set("Accept-Encoding", "zstd")
	req.Header.Set("Keep-Alive", "timeout=5")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusTeapot || resp.Header.Get("X-Engine") != "vllm" || string(b) != `{"error":{"message":"short and stout","code":418}}` {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, b)
	}
}

// An engine that is not there: 502 with a JSON error naming the engine,
// counted; an engine that breaks off mid-answer aborts the caller's
// connection (an error, not a short 200), counted too.
func TestEngineFailures(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	_ = ln.Close()
	f := newGuard(t, guard.Config{Upstream: dead, Key: guardKey})
	resp, body := do(t, "POST", f.srv.URL+"/pause", "Bearer "+guardKey, nil)
	var e struct{ Error string }
	if resp.StatusCode != http.StatusBadGateway || json.Unmarshal(body, &e) != nil || !strings.Contains(e.Error, ln.Addr().String()) {
		t.Fatalf("dead engine: %d %s", resp.StatusCode, body)
	}
	checkCounter(t, f, "asyncrl_engine_guard_upstream_errors_total", nil, 1)

	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		_, _ = io.WriteString(w, `{"choices":[`)
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the engine dies mid-answer
	}))
	defer eng.Close()
	f2 := newGuard(t, guard.Config{Upstream: eng.URL, Key: guardKey})
	req, _ := http.NewRequest("POST", f2.srv.URL+"/v1/completions", nil)
	req.Header.Set("Authorization", "Bearer "+guardKey)
	resp2, err := http.DefaultClient.Do(req)
	if err == nil {
		_, err = io.ReadAll(resp2.Body)
		resp2.Body.Close()
	}
	if err == nil {
		t.Fatal("a cut answer reached the caller without an error")
	}
	deadline := time.Now().Add(5 * time.Second)
	for counter(t, f2, "asyncrl_engine_guard_upstream_errors_total", nil) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the cut answer was not counted")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// /health is guarded by default; with OpenHealth only GET and HEAD of
// exactly /health pass without the key.
func TestHealth(t *testing.T) {
	eng := newRecorder(t)
	closed := newGuard(t, guard.Config{Upstream: eng.URL, Key: guardKey})
	if resp, _ := do(t, "GET", closed.srv.URL+"/health", "", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("default /health without key: %d", resp.StatusCode)
	}
	if resp, _ := do(t, "GET", closed.srv.URL+"/health", "Bearer "+guardKey, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("default /health with key: %d", resp.StatusCode)
	}
	eng.take()
	open := newGuard(t, guard.Config{Upstream: eng.URL, Key: guardKey, OpenHealth: true})
	for _, m := range []string{"GET", "HEAD"} {
		if resp, _ := do(t, m, open.srv.URL+"/health", "", nil); resp.StatusCode != http.StatusOK {
			t.Errorf("open %s /health: %d", m, resp.StatusCode)
		}
	}
	if n := len(eng.take()); n != 2 {
		t.Fatalf("engine saw %d health probes", n)
	}
	for _, c := range []struct{ m, p, auth string }{
		{"POST", "/health", ""}, {"GET", "/health/x", ""}, {"GET", "/healthz", ""}, {"GET", "//health", ""},
		{"GET", "/health?x=/pause", "Bearer nope"}, {"GET", "/pause", ""},
	} {
		if resp, _ := do(t, c.m, open.srv.URL+c.p, c.auth, nil); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("open health, %s %s %q: %d, want 401", c.m, c.p, c.auth, resp.StatusCode)
		}
	}
	if got := eng.take(); len(got) != 0 {
		t.Fatalf("engine saw %+v", got)
	}
}

// A refusal is logged (rate-limited) with its reason and path, never with
// the presented token.
func TestRefusalLogNeverQuotesKeys(t *testing.T) {
	eng := newRecorder(t)
	f := newGuard(t, guard.Config{Upstream: eng.URL, Key: guardKey, UpstreamKey: engKey})
	for i := 0; i < 20; i++ {
		do(t, "POST", f.srv.URL+"/collective_rpc", "Bearer presented-secret-"+engKey, []byte(`{}`))
	}
	do(t, "POST", f.srv.URL+"/pause", "Bearer "+guardKey, nil)
	logs := f.logText()
	if !strings.Contains(logs, `"reason":"wrong_key"`) || !strings.Contains(logs, "/collective_rpc") {
		t.Fatalf("no refusal logged: %s", logs)
	}
	if strings.Count(logs, "refused") > 5 {
		t.Errorf("refusals not rate-limited: %d lines", strings.Count(logs, "refused"))
	}
	for _, s := range []string{"presented-secret", engKey, guardKey} {
		if strings.Contains(logs, s) {
			t.Errorf("log quotes %q: %s", s, logs)
		}
	}
}
