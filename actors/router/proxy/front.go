package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asyncrl/asyncrl/internal/h1"
	"github.com/asyncrl/asyncrl/internal/rawio"
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

// fastConn is one client connection of the fast front. Its goroutine
// reads a request, forwards it and writes the answer, then the next.
type fastConn struct {
	r    *Router
	c    net.Conn
	hand *handoffListener
	rw   rawio.Writer // reads (cr) and writes (out) go through rw.C
	cr   connReader
	br   *bufio.Reader
	head h1.Head
	hbuf []byte   // the current head, copied out of br (its slices alias it)
	ctx  *connCtx // ends when the client goes away (or the connection ends)
	out  fastOut

	// The disconnect watch (watch, unwatch, backgroundRead).
	timer     *time.Timer
	wmu       sync.Mutex
	wcond     sync.Cond
	watching  bool
	reading   bool // a background read is running
	unblocked bool // unwatch set the past deadline that ends it
	closing   bool // stop: close after the current request

	// idleSince is when the connection began waiting for its next request
	// head (unix ns); 0 while a request is served, reaped once reapIdle
	// closed it for idling past Config.IdleTimeout.
	idleSince atomic.Int64
}

func (r *Router) newFastConn(c net.Conn, hand *handoffListener) *fastConn {
	fc := &fastConn{r: r, c: c, hand: hand}
	fc.rw.C = rawio.New(c)
	fc.cr.c = fc.rw.C
	fc.br = readers.Get().(*bufio.Reader)
	fc.br.Reset(&fc.cr)
	fc.ctx = newConnCtx()
	fc.wcond.L = &fc.wmu
	fc.out.fc = fc
	f := &r.front
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		fc.release()
		return nil
	}
	f.conns[fc] = struct{}{}
	return fc
}

var (
	readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, frontReadBuf) }}
	writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, frontWriteBuf) }}
)

func (fc *fastConn) release() {
	fc.ctx.cancel()
	if fc.timer != nil {
		fc.timer.Stop()
	}
	fc.br.Reset(nil)
	readers.Put(fc.br)
	fc.br = nil
}

func (fc *fastConn) untrack() {
	fc.r.front.mu.Lock()
	delete(fc.r.front.conns, fc)
	fc.r.front.mu.Unlock()
}

// stop makes the connection close: at once when it waits for a request,
// after the current one otherwise.
func (fc *fastConn) stop() {
	fc.wmu.Lock()
	fc.closing = true
	busy := fc.watching
	fc.wmu.Unlock()
	if !busy {
		_ = fc.c.SetReadDeadline(aLongTimeAgo)
	}
}

func (fc *fastConn) serve() {
	handedOff := false
	defer func() {
		if p := recover(); p != nil && p != http.ErrAbortHandler {
			fc.r.log.Error().Interface("panic", p).Msg("router front: request panicked")
		}
		fc.untrack()
		if !handedOff {
			_ = fc.c.Close()
		}
		fc.release()
	}()
	for {
		since := time.Now().UnixNano()
		fc.idleSince.Store(since)
		n, v := fc.readHead()
		if !fc.idleSince.CompareAndSwap(since, 0) {
			return // reapIdle closed it: idle past Config.IdleTimeout
		}
		switch v {
		case h1.HandOff:
			handedOff = fc.handOff()
			return
		case h1.Incomplete: // the client closed or broke the connection
			return
		}
		if _, err := fc.br.Discard(n); err != nil || !fc.request() {
			return
		}
		fc.wmu.Lock()
		closing := fc.closing
		fc.wmu.Unlock()
		if closing {
			return
		}
	}
}

// readHead reads until br holds a whole request head and parses it; its
// length is returned with h1.OK. h1.HandOff: net/http takes the
// connection, buffered bytes included; h1.Incomplete: the connection
// ended or failed.
func (fc *fastConn) readHead() (int, h1.Verdict) {
	for {
		buf, _ := fc.br.Peek(fc.br.Buffered())
		if end := indexHeadEnd(buf); end >= 0 {
			fc.hbuf = append(fc.hbuf[:0], buf[:end]...)
			n, v := h1.Parse(fc.hbuf, &fc.head)
			if v == h1.OK && handOffPath(fc.head.Target) {
				v = h1.HandOff
			}
			return n, v
		}
		if _, v := h1.Parse(buf, &fc.head); v == h1.HandOff {
			return 0, v
		}
		if fc.br.Buffered() == fc.br.Size() {
			return 0, h1.HandOff // a head longer than the buffer: net/http's limits apply
		}
		if _, err := fc.br.Peek(fc.br.Buffered() + 1); err != nil {
			return 0, h1.Incomplete
		}
	}
}

func indexHeadEnd(b []byte) int {
	if i := bytes.Index(b, headEnd); i >= 0 {
		return i + len(headEnd)
	}
	return -1
}

var headEnd = []byte("\r\n\r\n")

// handOffPath reports whether a target goes to net/http's handlers
// rather than the proxied path: the admin API and /finish_session.
func handOffPath(target []byte) bool {
	t := string(target) // no allocation: compared only
	return strings.HasPrefix(t, "/admin") || strings.HasPrefix(t, "/finish_session")
}

// handOff gives the connection, with the bytes read but not consumed, to
// the net/http server; it reports whether that server took it.
func (fc *fastConn) handOff() bool {
	pre, _ := fc.br.Peek(fc.br.Buffered())

	data := append([]byte(nil), pre...)
	if fc.cr.has {
		data = append(data, fc.cr.b)
		fc.cr.has = false
	}
	return fc.hand.give(&prefixConn{Conn: fc.c, pre: data})
}

// request serves one parsed request; false ends the connection.
func (fc *fastConn) request() bool {
	r, h := fc.r, &fc.head
	start := time.Now()
	fc.out.reset()
	if !r.enter() {
		fc.out.fail(http.StatusServiceUnavailable, "router is shutting down", 0)
		return fc.skipBody() && fc.out.ok()
	}
	defer r.leave()
	if h.ContentLength > r.cfg.MaxBodyBytes {
		fc.out.closeAfter = true // the body stays unread
		r.tooLarge(&fc.out)
		return false
	}
	var body []byte
	if h.ContentLength > 0 {
		var err error
		body, err = readBody(&io.LimitedReader{R: fc.br, N: h.ContentLength}, h.ContentLength, r.cfg.MaxBodyBytes)
		if err != nil || int64(len(body)) < h.ContentLength {
			r.metrics.errors.WithLabelValues("", "read_body").Inc()
			return false // the client went away mid-body
		}
	}
	fc.watch()
	r.forward(fc, &fc.out, body, start)
	fc.unwatch()
	return fc.out.ok()
}

// skipBody discards a refused request's body, so the connection can go
// on; a large one closes it instead.
func (fc *fastConn) skipBody() bool {
	if fc.head.ContentLength > 1<<20 {
		return false
	}
	_, err := fc.br.Discard(int(fc.head.ContentLength))
	return err == nil
}

// The fast front as an inbound request.

func (fc *fastConn) reqCtx() context.Context { return fc.ctx }

func (fc *fastConn) method() string {
	if string(fc.head.Method) == http.MethodGet {
		return http.MethodGet
	}
	return http.MethodPost
}

func (fc *fastConn) uri() string { return string(fc.head.Target) }

func (fc *fastConn) header(name string) string {
	v, _ := fc.head.Get(name)
	return string(v)
}

func (fc *fastConn) writeHeaders(w *bufio.Writer) {
	w.Write(appendFields(w.AvailableBuffer(), fc.head.Headers, forwarded))
}

func (fc *fastConn) httpHeader() http.Header {
	h := make(http.Header, len(fc.head.Headers))
	for _, f := range fc.head.Headers {
		k := http.CanonicalHeaderKey(string(f.Name))
		h[k] = append(h[k], string(f.Value))
	}
	return h
}

// forwarded reports whether a client's header field goes upstream: not
// hop-by-hop, and not one the hop sets itself (Host, Content-Length;
// Expect: the body is already read).
func forwarded(f h1.Header) bool {
	return !f.Hop && !isFieldName(f.Name, "Host") && !isFieldName(f.Name, "Content-Length") && !isFieldName(f.Name, "Expect")
}

func isFieldName(b []byte, name string) bool {
	return len(b) == len(name) && strings.EqualFold(string(b), name)
}

// watch starts the disconnect watch for a request waiting on its
// replica: after watchDelay a background read of one byte runs; EOF or
// an error there means the client went away (fc.ctx ends, which aborts
// the upstream request); a byte read is the next pipelined request's
// and is kept (connReader).
func (fc *fastConn) watch() {
	fc.wmu.Lock()
	fc.watching = true
	fc.wmu.Unlock()
	if fc.timer == nil {
		fc.timer = time.AfterFunc(watchDelay, fc.backgroundRead)
		return
	}
	fc.timer.Reset(watchDelay)
}

func (fc *fastConn) backgroundRead() {
	fc.wmu.Lock()
	if !fc.watching || fc.reading || fc.cr.has {
		fc.wmu.Unlock()
		return
	}
	fc.reading = true
	fc.wmu.Unlock()
	var b [1]byte
	n, err := fc.c.Read(b[:])
	fc.wmu.Lock()
	if n == 1 {
		fc.cr.b, fc.cr.has = b[0], true
	} else if err != nil && !fc.unblocked {
		fc.ctx.cancel() // the client closed or reset the connection
	}
	fc.reading = false
	fc.wcond.Broadcast()
	fc.wmu.Unlock()
}

// unwatch ends the watch: it stops a background read still blocked
// (a past read deadline) and waits for it.
func (fc *fastConn) unwatch() {
	fc.timer.Stop()
	fc.wmu.Lock()
	fc.watching = false
	// A read may run even when Stop stopped this request's timer: the
	// previous request's callback can start late, in this one's watch.
	if fc.reading {
		fc.unblocked = true
		_ = fc.c.SetReadDeadline(aLongTimeAgo)
		for fc.reading {
			fc.wcond.Wait()
		}
		fc.unblocked = false
		if !fc.closing {
			_ = fc.c.SetReadDeadline(time.Time{})
		}
	}
	fc.wmu.Unlock()
}

// connReader is the connection under the fast front's bufio.Reader: it
// returns first the byte a background read took.
type connReader struct {
	c   io.Reader
	b   byte
	has bool
}

func (cr *connReader) Read(p []byte) (int, error) {
	if cr.has && len(p) > 0 {
		p[0], cr.has = cr.b, false
		return 1, nil
	}
	return cr.c.Read(p)
}

// fastOut writes the fast front's answers as bytes: the head and a small
// body leave in one write; a streamed answer is re-chunked and flushed per
// chunk, with the version trailers at its end.
type fastOut struct {
	fc         *fastConn
	bw         *bufio.Writer
	scratch    []byte
	chunked    bool
	flush      bool
	closeAfter bool
	err        error
}

func (o *fastOut) reset() {
	o.chunked, o.flush, o.closeAfter, o.err = false, false, o.fc.head.Close, nil
}

// ok reports whether the connection can carry the next request.
func (o *fastOut) ok() bool { return o.err == nil && !o.closeAfter }

func (o *fastOut) writer() *bufio.Writer {
	if o.bw == nil {
		o.bw = writers.Get().(*bufio.Writer)
		o.bw.Reset(&o.fc.rw)
	}
	return o.bw
}

// finish flushes the answer and returns the write buffer to its pool.
// It does not wait for readability (rawio.WriteAwait): a client may
// have pipelined its next request, or half-closed, while this one was
// served, and WriteAwait would not see that input (RawRead's
// prepareRead drops the poller's recorded readiness).
func (o *fastOut) finish() {
	if o.bw == nil {
		return
	}
	if err := o.bw.Flush(); err != nil && o.err == nil {
		o.err = err
	}
	o.bw.Reset(nil)
	writers.Put(o.bw)
	o.bw = nil
}

func (o *fastOut) fail(code int, msg string, retryAfter int) {
	b := appendError(o.scratch[:0], code, msg, retryAfter, o.closeAfter)
	o.scratch = b
	w := o.writer()
	_, _ = w.Write(b)
	o.finish()
}

// appendError appends a local vLLM-style JSON error answer (fail).
func appendError(b []byte, code int, msg string, retryAfter int, closeAfter bool) []byte {
	body, _ := json.Marshal(errorValue(code, msg))
	body = append(body, '\n')
	b = h1.AppendStatusLine(b, code, statusText(code))
	b = append(b, "Content-Type: application/json\r\n"...)
	if retryAfter > 0 {
		b = append(b, "Retry-After: "...)
		b = strconv.AppendInt(b, int64(retryAfter), 10)
		b = append(b, "\r\n"...)
	}
	b = appendHeadEnd(b, int64(len(body)), closeAfter)
	return append(b, body...)
}

// appendRelayedHead appends a relayed answer's head up to its framing:
// the status line, the replica's end-to-end headers (from its parsed
// head lh when not nil, else from h) and the router's own (replica,
// versions).
func appendRelayedHead(b []byte, code int, lh *h1.RespHead, h http.Header, replica string, vs versionSpan) []byte {
	b = h1.AppendStatusLine(b, code, statusText(code))
	if lh != nil {
		b = appendLean(b, lh)
	} else {
		b = appendHeaders(b, h)
	}
	b = h1.AppendHeader(b, ReplicaHeader, replica)
	return appendVersions(b, vs)
}

// appendHeadEnd ends a head: Content-Length when length >= 0,
// Connection: close when closeAfter, and the blank line.
func appendHeadEnd(b []byte, length int64, closeAfter bool) []byte {
	if length >= 0 {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, length, 10)
		b = append(b, "\r\n"...)
	}
	if closeAfter {
		b = append(b, "Connection: close\r\n"...)
	}
	return append(b, "\r\n"...)
}

func statusText(code int) string {
	if t := http.StatusText(code); t != "" {
		return t
	}
	return "status code " + strconv.Itoa(code)
}

func (o *fastOut) head(resp *http.Response, replica string, vs versionSpan, trailers, flush bool) error {
	b := appendRelayedHead(o.scratch[:0], resp.StatusCode, leanHead(resp), resp.Header, replica, vs)
	length := int64(-1)
	switch {
	case h1.Bodiless(resp.StatusCode):
	case resp.ContentLength >= 0:
		length = resp.ContentLength
	default:
		o.chunked = true
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
		if trailers {
			b = append(b, "Trailer: "+VersionMinHeader+", "+VersionMaxHeader+"\r\n"...)
		}
	}
	b = appendHeadEnd(b, length, o.closeAfter)
	o.scratch = b
	o.flush = flush
	w := o.writer()
	if _, err := w.Write(b); err != nil {
		o.err = err
		return err
	}
	if flush {
		o.err = w.Flush()
	}
	return o.err
}

// appendHeaders appends the replica's end-to-end headers (copyHeaders'
// rules), less the framing and the router's own, which head writes.
func appendHeaders(b []byte, h http.Header) []byte {
	named := connectionNamed(h)
	for k, vs := range h {
		if isHopHeader(k) || k == "Content-Length" || k == ReplicaHeader || k == VersionMinHeader ||
			k == VersionMaxHeader || contains(named, k) {
			continue
		}
		for _, v := range vs {
			b = h1.AppendHeader(b, k, v)
		}
	}
	return b
}

// appendVersions appends the version header (or trailer) lines of vs.
func appendVersions(b []byte, vs versionSpan) []byte {
	b = append(b, VersionMinHeader+": "...)
	b = strconv.AppendInt(b, vs.min, 10)
	b = append(b, "\r\n"+VersionMaxHeader+": "...)
	b = strconv.AppendInt(b, vs.max, 10)
	return append(b, "\r\n"...)
}

// appendLean appends a lean answer's end-to-end header lines as the
// replica sent them (appendHeaders' rules).
func appendLean(b []byte, lh *h1.RespHead) []byte { return appendFields(b, lh.Headers, relayed) }

// relayed reports whether a replica's answer field goes to the client:
// not hop-by-hop, and not one the router writes itself (the length, the
// replica, the versions).
func relayed(f h1.Header) bool {
	return !f.Hop && !isFieldName(f.Name, "Content-Length") && !isFieldName(f.Name, ReplicaHeader) &&
		!isFieldName(f.Name, VersionMinHeader) && !isFieldName(f.Name, VersionMaxHeader)
}

// appendFields appends the header lines of hs that keep accepts, as the
// peer sent them.
func appendFields(b []byte, hs []h1.Header, keep func(h1.Header) bool) []byte {
	for _, f := range hs {
		if keep(f) {
			b = append(b, f.Name...)
			b = append(b, ": "...)
			b = append(b, f.Value...)
			b = append(b, "\r\n"...)
		}
	}
	return b
}

func (o *fastOut) write(p []byte) error {
	if o.err != nil {
		return o.err
	}
	w := o.writer()
	if o.chunked {
		o.scratch = h1.AppendChunkSize(o.scratch[:0], len(p))
		_, _ = w.Write(o.scratch)
	}
	_, _ = w.Write(p)
	if o.chunked {
		_, _ = w.WriteString("\r\n")
	}
	if o.flush {
		o.err = w.Flush()
	}
	return o.err
}

func (o *fastOut) end(vs *versionSpan) {
	if o.chunked && o.err == nil {
		b := append(o.scratch[:0], "0\r\n"...)
		if vs != nil {
			b = appendVersions(b, *vs)
		}
		b = append(b, "\r\n"...)
		o.scratch = b
		_, _ = o.writer().Write(b)
	}
	o.finish()
}

// abort drops what is buffered and closes the connection: the client
// sees it end before the answer does, never a clean short answer.
func (o *fastOut) abort() {
	if o.bw != nil {
		o.bw.Reset(nil)
		writers.Put(o.bw)
		o.bw = nil
	}
	o.err = errAborted
	_ = o.fc.c.Close()
}

var errAborted = errors.New("proxy: answer aborted")

// handoffListener hands connections the fast front gives up on to a
// net/http server.
type handoffListener struct {
	addr net.Addr
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newHandoffListener(addr net.Addr) *handoffListener {
	return &handoffListener{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }

// give passes c to the server; false when the listener is closed.
func (l *handoffListener) give(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

// prefixConn is a connection whose first reads return pre: the bytes the
// fast front had read before handing the connection off.
type prefixConn struct {
	net.Conn
	pre []byte
}

// CloseWrite lets net/http half-close before closing after an error
// answer (its 400s and 431s), so the client reads the answer instead of
// a reset.
func (c *prefixConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
