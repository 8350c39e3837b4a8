package faultproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// backend is a real HTTP server: /hello answers at once, /stream sends a
// line every 20 ms until the client goes away.
func backend(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "hello %s", body)
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		fl := w.(http.Flusher)
		for i := 0; ; i++ {
			if _, err := fmt.Fprintf(w, "chunk %d\n", i); err != nil {
				return
			}
			fl.Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func newProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := Listen("", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// client has no keep-alive, so every request is a new connection and sees
// the fault as it is now.
func client(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
}

func get(c *http.Client, url string) (string, error) {
	resp, err := c.Post(url, "text/plain", strings.NewReader("proxy"))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func TestPassThrough(t *testing.T) {
	b := backend(t)
	p := newProxy(t, strings.TrimPrefix(b.URL, "http://"))
	c := client(5 * time.Second)
	for i := range 3 {
		got, err := get(c, p.URL()+"/hello")
		if err != nil || got != "hello proxy" {
			t.Fatalf("request %d: %q, %v", i, got, err)
		}
	}
	if s := p.Stats(); s.Accepted != 3 || s.Reset != 0 || s.Blackholed != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestLatencyDelaysEveryExchange(t *testing.T) {
	b := backend(t)
	p := newProxy(t, strings.TrimPrefix(b.URL, "http://"))
	const d = 150 * time.Millisecond
	if err := p.Set(Fault{Kind: Latency, Delay: d}); err != nil {
		t.Fatal(err)
	}
	c := client(5 * time.Second)
	start := time.Now()
	got, err := get(c, p.URL()+"/hello")
	if err != nil || got != "hello proxy" {
		t.Fatalf("%q, %v", got, err)
	}
	// A lower bound only: the request and the response each waited d.
	if el := time.Since(start); el < 2*d {
		t.Fatalf("took %v, want ≥ %v with %v each way", el, 2*d, d)
	}
	if s := p.Stats(); s.Delayed < 2 {
		t.Fatalf("stats %+v: want the request and the response delayed", s)
	}
	if err := p.Set(Fault{Kind: Latency}); !errors.Is(err, ErrFault) {
		t.Fatalf("latency without delay: %v", err)
	}
}

// isReset: a reset can also reach the client as EPIPE when the proxy drops
// the connection before the request is fully written.
func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		strings.Contains(err.Error(), "connection reset")
}

func TestResetRefusesNewConnections(t *testing.T) {
	b := backend(t)
	p := newProxy(t, strings.TrimPrefix(b.URL, "http://"))
	if err := p.Set(Fault{Kind: Reset}); err != nil {
		t.Fatal(err)
	}
	_, err := get(client(5*time.Second), p.URL()+"/hello")
	if err == nil || !isReset(err) {
		t.Fatalf("want a reset, got %v", err)
	}
	if s := p.Stats(); s.Reset < 1 {
		t.Fatalf("stats %+v", s)
	}
	// Healing brings the path back.
	if err := p.Set(Fault{Kind: Pass}); err != nil {
		t.Fatal(err)
	}
	if got, err := get(client(5*time.Second), p.URL()+"/hello"); err != nil || got != "hello proxy" {
		t.Fatalf("after heal: %q, %v", got, err)
	}
}

func TestResetMidStream(t *testing.T) {
	b := backend(t)
	p := newProxy(t, strings.TrimPrefix(b.URL, "http://"))
	c := client(10 * time.Second)
	resp, err := c.Get(p.URL() + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	for i := range 3 {
		line, err := r.ReadString('\n')
		if err != nil || line != fmt.Sprintf("chunk %d\n", i) {
			t.Fatalf("line %d: %q %v", i, line, err)
		}
	}
	if err := p.Set(Fault{Kind: Reset}); err != nil {
		t.Fatal(err)
	}
	// The stream must end in an error, never in a clean EOF: a truncated
	// response that looks complete would hide the fault.
	var rerr error
	for rerr == nil {
		_, rerr = r.ReadString('\n')
	}
	if errors.Is(rerr, io.EOF) || !isReset(rerr) {
		t.Fatalf("want a reset mid-stream, got %v", rerr)
	}
	if s := p.Stats(); s.Reset != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestBlackholeNeverAnswers(t *testing.T) {
	b := backend(t)
	p := newProxy(t, strings.TrimPrefix(b.URL, "http://"))
	if err := p.Set(Fault{Kind: Blackhole}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL()+"/hello", nil)
	_, err := client(0).Do(req)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want the deadline to pass unanswered, got %v", err)
	}
	if s := p.Stats(); s.Blackholed != 1 || s.Accepted != 1 {
		t.Fatalf("accepted but not blackholed: %+v", s)
	}
	if err := p.Set(Fault{Kind: Pass}); err != nil {
		t.Fatal(err)
	}
	if got, err := get(client(5*time.Second), p.URL()+"/hello"); err != nil || got != "hello proxy" {
		t.Fatalf("after heal: %q, %v", got, err)
	}
}

func TestBlackholeStallsLiveStreamUntilHealed(t *testing.T) {
	b := backend(t)
	p := newProxy(t, strings.TrimPrefix(b.URL, "http://"))
	resp, err := client(10 * time.Second).Get(p.URL() + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		r := bufio.NewReader(resp.Body)
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				return
			}
			lines <- l
		}
	}()
	<-lines
	if err := p.Set(Fault{Kind: Blackhole}); err != nil {
		t.Fatal(err)
	}
	// Drain what was already in flight, then nothing may arrive.
	quiet := 0
	for quiet < 3 {
		select {
		case <-lines:
			quiet = 0
		case <-time.After(100 * time.Millisecond):
			quiet++
		}
	}
	if s := p.Stats(); s.Held < 1 {
		t.Fatalf("stats %+v: the stalled chunk was not counted", s)
	}
	if err := p.Set(Fault{Kind: Pass}); err != nil {
		t.Fatal(err)
	}
	select {
	case l, ok := <-lines:
		if !ok || !strings.HasPrefix(l, "chunk ") {
			t.Fatalf("after heal: %q %v", l, ok)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stream did not resume after the blackhole healed")
	}
	_ = p.Close()
}

func TestTargetDownClosesClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	p := newProxy(t, addr)
	if _, err := get(client(5*time.Second), p.URL()+"/hello"); err == nil {
		t.Fatal("a dead target must fail the request")
	}
}

func TestBadInput(t *testing.T) {
	if _, err := Listen("", "no-port"); err == nil {
		t.Fatal("target without a port accepted")
	}
	p := newProxy(t, "127.0.0.1:1")
	if err := p.Set(Fault{Kind: Kind(9)}); !errors.Is(err, ErrFault) {
		t.Fatalf("unknown kind: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}
