package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkProxyOverhead measures a small completion request sent straight
// to a backend and the same request through the router, side by side; the
// difference is the router's cost per request (loopback, keep-alive).
func BenchmarkProxyOverhead(b *testing.B) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"choices":[{"text":"ok"}]}`)
	}))
	defer be.Close()
	cfg := DefaultConfig()
	cfg.HealthInterval, cfg.MetricsInterval = 0, 0
	cfg.Replicas = []string{be.URL}
	r, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	front := httptest.NewServer(r.Handler())
	defer front.Close()
	defer r.Shutdown(b.Context())
	client := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 16}}
	defer client.CloseIdleConnections()
	body := `{"prompt":"` + strings.Repeat("tok ", 256) + `","max_tokens":16}`
	for _, target := range []struct{ name, url string }{{"direct", be.URL}, {"via_router", front.URL}} {
		b.Run(target.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				req, _ := http.NewRequest(http.MethodPost, target.url+"/v1/completions", strings.NewReader(body))
				req.Header.Set("X-Session-ID", fmt.Sprint("s", i%64))
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}

// BenchmarkServe measures one small completion exchange through
// Router.Serve with each front (Config.Front), over one keep-alive
// connection (sequential) and over GOMAXPROCS×4 (parallel), in front of
// a raw backend that answers every request with the same small JSON (so
// the router's share of the time per op is large). It uses only the
// package's exported API, so the same file measures any revision.
func BenchmarkServe(b *testing.B) {
	back := benchBackend(b)
	body := `{"prompt":"` + strings.Repeat("tok ", 256) + `","max_tokens":16}`
	// direct: the same exchanges straight to the backend, no router: the
	// control of a before/after pair (it runs no code either changed).
	b.Run("direct", func(b *testing.B) { benchExchanges(b, strings.TrimPrefix(back, "http://"), body) })
	for _, f := range []string{FrontLoop, FrontFast, FrontNetHTTP} {
		b.Run(f, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.HealthInterval, cfg.MetricsInterval = 0, 0
			cfg.Replicas = []string{back}
			cfg.Front = f
			r, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			served := make(chan error, 1)
			go func() { served <- r.Serve(ln) }()
			defer func() {
				_ = r.Shutdown(context.Background())
				<-served
			}()
			benchExchanges(b, ln.Addr().String(), body)
		})
	}
}

// benchExchanges runs the sequential and parallel exchanges against addr.
func benchExchanges(b *testing.B, addr, body string) {
	b.Run("sequential", func(b *testing.B) {
		b.ReportAllocs()
		c := dialRouter(b, addr)
		defer c.close()
		cpu := startCPU()
		for i := 0; b.Loop(); i++ {
			c.exchange(b, "s"+strconv.Itoa(i%64), body)
		}
		cpu.report(b)
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(4)
		var n atomic.Int64
		cpu := startCPU()
		defer cpu.report(b)
		b.RunParallel(func(pb *testing.PB) {
			c := dialRouter(b, addr)
			defer c.close()
			sid := "p" + strconv.FormatInt(n.Add(1), 10)
			for pb.Next() {
				c.exchange(b, sid, body)
			}
		})
	})
}

// cpuClock reads the process's CPU time (user + system): the router's,
// the client's and the backend's together. On a loaded machine it moves
// less than wall time (waiting for a core is not counted), and the
// client and backend cost the same in every revision.
type cpuClock struct{ start time.Duration }

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startCPU() cpuClock { return cpuClock{cpuTime()} }

// report adds cpu-ns/op: the process's CPU time per exchange.
func (c cpuClock) report(b *testing.B) {
	b.ReportMetric(float64(cpuTime()-c.start)/float64(b.N), "cpu-ns/op")
}

// benchConn is a client keep-alive connection that writes a request's
// bytes and reads its answer with net/http's reader.
type benchConn struct {
	c  net.Conn
	br *bufio.Reader
}

func dialRouter(b *testing.B, addr string) *benchConn {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	return &benchConn{c: c, br: bufio.NewReader(c)}
}

func (c *benchConn) close() { _ = c.c.Close() }

func (c *benchConn) exchange(b *testing.B, sid, body string) {
	req := "POST /v1/completions HTTP/1.1\r\nHost: r\r\nX-Session-ID: " + sid +
		"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	if _, err := io.WriteString(c.c, req); err != nil {
		b.Error(err)
		return
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		b.Error(err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Errorf("status %d", resp.StatusCode)
	}
}

// benchBackend serves a trivial engine: every request (Content-Length
// body) gets the same small JSON answer, without net/http's server.
func benchBackend(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	b.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	const answer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 27\r\n\r\n" +
		`{"choices":[{"text":"ok"}]}`
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					n := 0
					for {
						line, err := br.ReadSlice('\n')
						if err != nil {
							return
						}
						if len(line) <= 2 {
							break
						}
						if v, ok := bytes.CutPrefix(bytes.ToLower(line), []byte("content-length:")); ok {
							n, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
						}
					}
					if _, err := br.Discard(n); err != nil {
						return
					}
					if _, err := io.WriteString(c, answer); err != nil {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}
