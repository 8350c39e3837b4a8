package front

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors/router/upstream"
)

// Fronts Serve can run (its mode).
const (
	// Fast is the router's own HTTP/1.1 server for the proxied path
	// (conn.go, out.go): the request head parsed in place without
	// net/http's maps, the answer relayed as bytes, no per-request
	// background read or deadline. Everything it does not serve (admin,
	// finish_session, chunked or Expect requests, HTTP/1.0, odd or
	// oversized heads) is handed to net/http's server on the same
	// connection.
	Fast = "fast"
	// NetHTTP serves Config.Handler with net/http's server.
	NetHTTP = "net_http"
	// Loop (the default) serves the fast front's plain requests from
	// event loops, one per P (loop_linux.go; elsewhere it is Fast).
	Loop = "loop"
)

// Config is what a Server is built with.
type Config struct {
	// Handler is the shell's net/http handler: the net_http front's, and
	// the one connections the fast fronts hand off are served by.
	Handler http.Handler
	// Upstream is the shell's lean upstream client; nil (a configured
	// Transport) makes the loop front run as the fast one. The loop
	// dials with its Dialer, keeps at most MaxIdle idle connections per
	// replica, and hands exchanges back to it (NewConn, TrackBody).
	Upstream *upstream.Client
	// MaxBodyBytes caps a request body (larger: Shell.TooLarge).
	MaxBodyBytes int64
	// IdleTimeout is how long a connection may wait for, or trickle in,
	// the head of its next request (0: DefaultIdleTimeout). A request
	// being served is never cut: a generation may take minutes.
	IdleTimeout time.Duration
	// LoopMaxAnswer is the largest answer body (by its Content-Length)
	// the loop front buffers whole and writes at once; a larger one is
	// relayed by a goroutine as the fast front relays it (0:
	// DefaultLoopMaxAnswer).
	LoopMaxAnswer int64
	// Logger logs a panic of a connection's goroutine or a loop.
	Logger zerolog.Logger
}

// DefaultIdleTimeout is Config.IdleTimeout's default: longer than the
// idle timeouts clients keep their own pooled connections for (Go's
// http.Transport: 90 s), so a client, not the router, normally closes an
// idle keep-alive connection.
const DefaultIdleTimeout = 2 * time.Minute

// DefaultLoopMaxAnswer is Config.LoopMaxAnswer's default: an engine's
// JSON answer fits many times over; the buffer a connection grows to
// for it stays small.
const DefaultLoopMaxAnswer = 1 << 20

// Server runs fronts on listeners for one Shell until Stop.
type Server struct {
	sh  Shell
	cfg Config

	mu      sync.Mutex
	stopped bool
	lns     map[net.Listener]struct{}
	conns   map[*fastConn]struct{}
	servers []*http.Server
	hand    *handoffListener // nil until the first fast Serve
	quit    chan struct{}    // closed by Stop: ends the idle reaper
	loops   map[frontLoop]struct{}
}

// New returns a Server of sh's fronts; it serves nothing until Serve.
func New(sh Shell, cfg Config) *Server {
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.LoopMaxAnswer <= 0 {
		cfg.LoopMaxAnswer = DefaultLoopMaxAnswer
	}
	return &Server{sh: sh, cfg: cfg}
}

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

// frontLoop is a running loop front (loop_linux.go), which Stop stops.
type frontLoop interface{ stop() }

func (s *Server) addLoop(l frontLoop) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return false
	}
	if s.loops == nil {
		s.loops = make(map[frontLoop]struct{})
	}
	s.loops[l] = struct{}{}
	return true
}

func (s *Server) removeLoop(l frontLoop) {
	s.mu.Lock()
	delete(s.loops, l)
	s.mu.Unlock()
}

// Serve serves on ln with the front mode names (Fast, NetHTTP, or Loop,
// also for "") until Stop; it then returns http.ErrServerClosed.
func (s *Server) Serve(ln net.Listener, mode string) error {
	switch mode {
	case NetHTTP:
		srv := &http.Server{Handler: s.cfg.Handler, ReadHeaderTimeout: 10 * time.Second}
		if !s.addServer(srv) {
			return http.ErrServerClosed
		}
		return srv.Serve(ln)
	case Fast:
		return s.serveFast(ln)
	}
	return s.serveLoop(ln) // Loop, the default ("")
}

// serveFast runs the fast front on ln: a goroutine per connection.
func (s *Server) serveFast(ln net.Listener) error {
	hand, ok := s.trackListener(ln)
	if !ok {
		return http.ErrServerClosed
	}
	defer s.untrackListener(ln)
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.frontStopped() {
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
		fc := s.newFastConn(c, hand)
		if fc == nil {
			_ = c.Close()
			return http.ErrServerClosed
		}
		go fc.serve()
	}
}

func (s *Server) addServer(srv *http.Server) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return false
	}
	s.servers = append(s.servers, srv)
	return true
}

// trackListener registers ln and returns the hand-off listener, starting
// its net/http server on first use.
func (s *Server) trackListener(ln net.Listener) (*handoffListener, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil, false
	}
	if s.lns == nil {
		s.lns = make(map[net.Listener]struct{})
		s.conns = make(map[*fastConn]struct{})
	}
	s.lns[ln] = struct{}{}
	if s.hand == nil {
		s.hand = newHandoffListener(ln.Addr())
		srv := &http.Server{Handler: s.cfg.Handler, ReadHeaderTimeout: 10 * time.Second}
		s.servers = append(s.servers, srv)
		go func() { _ = srv.Serve(s.hand) }()
		s.quit = make(chan struct{})
		go s.reapIdle(s.quit)
	}
	return s.hand, true
}

func (s *Server) untrackListener(ln net.Listener) {
	s.mu.Lock()
	delete(s.lns, ln)
	s.mu.Unlock()
}

func (s *Server) frontStopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

// reapIdle closes, every quarter of the idle timeout, the fast
// connections that have waited for (or trickled) their next request head
// longer than it. It claims a connection by swapping its idleSince for
// reaped, so a connection that finished its head first keeps it, and only
// then unblocks its read with a past deadline: a request being served
// (idleSince 0), and its disconnect watch, are never touched.
func (s *Server) reapIdle(quit <-chan struct{}) {
	idle := s.cfg.IdleTimeout
	t := time.NewTicker(idle / 4)
	defer t.Stop()
	for {
		select {
		case <-quit:
			return
		case now := <-t.C:
			s.mu.Lock()
			conns := make([]*fastConn, 0, len(s.conns))
			for c := range s.conns {
				conns = append(conns, c)
			}
			s.mu.Unlock()
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

// Stop closes the listeners, stops the loops (they close their idle
// connections, and the others after their current answer), wakes the
// idle fast connections (they close), and shuts the net/http servers
// down within ctx (closing what is still open when ctx ends). Serve returns http.ErrServerClosed. The shell calls it
// once its in-flight requests are done (or it gave up on them).
func (s *Server) Stop(ctx context.Context) {
	s.mu.Lock()
	if !s.stopped && s.quit != nil {
		close(s.quit)
	}
	s.stopped = true
	servers := slices.Clone(s.servers)
	lns := make([]net.Listener, 0, len(s.lns))
	for ln := range s.lns {
		lns = append(lns, ln)
	}
	conns := make([]*fastConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	loops := make([]frontLoop, 0, len(s.loops))
	for l := range s.loops {
		loops = append(loops, l)
	}
	s.mu.Unlock()
	for _, ln := range lns {
		_ = ln.Close()
	}
	for _, l := range loops {
		l.stop()
	}
	for _, c := range conns {
		c.stop()
	}
	for _, srv := range servers {
		// net/http's Shutdown leaves active connections open when ctx
		// ends first (a body still coming): Close cuts them, as the fast
		// fronts cut theirs, so no admitted request outlives Stop.
		if srv.Shutdown(ctx) != nil {
			_ = srv.Close()
		}
	}
}
