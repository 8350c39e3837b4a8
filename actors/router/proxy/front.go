package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Front ends Serve can run (Config.Front).
const (
	// FrontFast is the router's own HTTP/1.1 server for the proxied path
	// (this file): the request head parsed in place without net/http's
	// maps, the answer relayed as bytes, no per-request background read
	// or deadline. Everything it does not serve (admin, finish_session,
	// chunked or Expect requests, HTTP/1.0, odd or oversized heads) is
	// handed to net/http's server on the same connection.
	FrontFast = "fast"
	// FrontNetHTTP serves Handler with net/http's server.
	FrontNetHTTP = "net_http"
	// FrontLoop (the default) serves the fast front's plain requests
	// from event loops, one per P (loop_linux.go; elsewhere it is
	// FrontFast).
	FrontLoop = "loop"
)

// Buffer sizes of the fast front: a request head longer than the read
// buffer is handed off to net/http (which allows 1 MB and answers 431
// above); the write buffer holds a small answer's head and body, so they
// leave in one write.
const (
	frontReadBuf  = 8 << 10
	frontWriteBuf = 8 << 10
)

// watchDelay is how long a request waits on its replica before the fast
// front starts watching the client's connection for a disconnect (which
// cancels the upstream request). A request answered sooner pays nothing
// for the watch (no goroutine, no read); a disconnect is noticed at most
// this late. net/http's server starts that read for every request. It was
// 5 ms, but under load every request queues that long on a 2-core
// machine, and the watch's goroutine, read and deadlines were then 15 %
// of the router's CPU per request at 256 connections (BENCHMARKS.md "Raw
// system calls"); a generation outlives 100 ms by far, so cancelling it
// that late costs an engine little.
const watchDelay = 100 * time.Millisecond

// aLongTimeAgo is a deadline in the past: it unblocks a read at once.
var aLongTimeAgo = time.Unix(1, 0)

// frontState is what Serve and Shutdown share: listeners, the fast
// front's connections, net/http servers (the net_http front, and the
// fast front's hand-off server).
type frontState struct {
	mu      sync.Mutex
	stopped bool
	lns     map[net.Listener]struct{}
	conns   map[*fastConn]struct{}
	servers []*http.Server
	hand    *handoffListener // nil until the first fast Serve
	quit    chan struct{}    // closed by stopFront: ends the idle reaper
	loops   map[frontLoop]struct{}
}

// frontLoop is a running loop front (loop_linux.go), which stopFront stops.
type frontLoop interface{ stop() }

func (r *Router) addLoop(l frontLoop) bool {
	f := &r.front
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return false
	}
	if f.loops == nil {
		f.loops = make(map[frontLoop]struct{})
	}
	f.loops[l] = struct{}{}
	return true
}

func (r *Router) removeLoop(l frontLoop) {
	r.front.mu.Lock()
	delete(r.front.loops, l)
	r.front.mu.Unlock()
}

// Serve serves the router on ln with the front end Config.Front names
// until Shutdown; it then returns http.ErrServerClosed. Shutdown refuses
// new requests with 503 while in-flight ones finish, then closes the
// listeners and the connections. The in-process path (internal/inproc)
// uses Handler instead.
func (r *Router) Serve(ln net.Listener) error {
	switch r.cfg.Front {
	case FrontNetHTTP:
		srv := &http.Server{Handler: r.mux, ReadHeaderTimeout: 10 * time.Second}
		if !r.addServer(srv) {
			return http.ErrServerClosed
		}
		return srv.Serve(ln)
	case FrontFast:
		return r.serveFast(ln)
	}
	return r.serveLoop(ln) // FrontLoop, the default ("")
}

// serveFast runs the fast front on ln: a goroutine per connection.
func (r *Router) serveFast(ln net.Listener) error {
	hand, ok := r.trackListener(ln)
	if !ok {
		return http.ErrServerClosed
	}
	defer r.untrackListener(ln)
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if r.frontStopped() {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		fc := r.newFastConn(c, hand)
		if fc == nil {
			_ = c.Close()
			return http.ErrServerClosed
		}
		go fc.serve()
	}
}

func (r *Router) addServer(srv *http.Server) bool {
	f := &r.front
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return false
	}
	f.servers = append(f.servers, srv)
	return true
}

// trackListener registers ln and returns the hand-off listener, starting
// its net/http server on first use.
func (r *Router) trackListener(ln net.Listener) (*handoffListener, bool) {
	f := &r.front
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return nil, false
	}
	if f.lns == nil {
		f.lns = make(map[net.Listener]struct{})
		f.conns = make(map[*fastConn]struct{})
	}
	f.lns[ln] = struct{}{}
	if f.hand == nil {
		f.hand = newHandoffListener(ln.Addr())
		srv := &http.Server{Handler: r.mux, ReadHeaderTimeout: 10 * time.Second}
		f.servers = append(f.servers, srv)
		go func() { _ = srv.Serve(f.hand) }()
		f.quit = make(chan struct{})
		go r.reapIdle(f.quit)
	}
	return f.hand, true
}

func (r *Router) untrackListener(ln net.Listener) {
	r.front.mu.Lock()
	delete(r.front.lns, ln)
	r.front.mu.Unlock()
}

func (r *Router) frontStopped() bool {
	r.front.mu.Lock()
	defer r.front.mu.Unlock()
	return r.front.stopped
}

// reapIdle closes, every quarter of the idle timeout, the fast
// connections that have waited for (or trickled) their next request head
// longer than it. It claims a connection by swapping its idleSince for
// reaped, so a connection that finished its head first keeps it, and only
// then unblocks its read with a past deadline: a request being served
// (idleSince 0), and its disconnect watch, are never touched.
func (r *Router) reapIdle(quit <-chan struct{}) {
	idle := r.cfg.IdleTimeout
	if idle <= 0 {
		idle = DefaultIdleTimeout
	}
	t := time.NewTicker(idle / 4)
	defer t.Stop()
	for {
		select {
		case <-quit:
			return
		case now := <-t.C:
			f := &r.front
			f.mu.Lock()
			conns := make([]*fastConn, 0, len(f.conns))
			for c := range f.conns {
				conns = append(conns, c)
			}
			f.mu.Unlock()
			for _, c := range conns {
				since := c.idleSince.Load()
				if since > 0 && now.UnixNano()-since > int64(idle) && c.idleSince.CompareAndSwap(since, reaped) {
					_ = c.c.SetReadDeadline(aLongTimeAgo)
				}
			}
		}
	}
}

// reaped marks a fastConn's idleSince once reapIdle claimed it.
const reaped = -1

// stopFront closes the listeners, wakes the idle fast connections (they
// close), and shuts the net/http servers down within ctx.
func (r *Router) stopFront(ctx context.Context) {
	f := &r.front
	f.mu.Lock()
	if !f.stopped && f.quit != nil {
		close(f.quit)
	}
	f.stopped = true
	servers := slices.Clone(f.servers)
	lns := make([]net.Listener, 0, len(f.lns))
	for ln := range f.lns {
		lns = append(lns, ln)
	}
	conns := make([]*fastConn, 0, len(f.conns))
	for c := range f.conns {
		conns = append(conns, c)
	}
	loops := make([]frontLoop, 0, len(f.loops))
	for l := range f.loops {
		loops = append(loops, l)
	}
	f.mu.Unlock()
	for _, ln := range lns {
		_ = ln.Close()
	}
	for _, l := range loops {
		l.stop()
	}
	for _, c := range conns {
		c.stop()
	}
	for _, s := range servers {
		_ = s.Shutdown(ctx)
	}
}
