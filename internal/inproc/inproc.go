// Package inproc serves HTTP requests to handlers of the same process
// without a socket: a Transport (an http.RoundTripper) looks the request's
// host:port up in a Registry and, when a handler is registered there,
// runs it on an in-memory request and response; any other request goes to
// the base RoundTripper unchanged.
//
// Why: in `asyncrl run` the rollout actors, the router and the built-in
// engines live in one process, and each in-flight turn over loopback TCP
// holds four sockets (rollout client, router server side, router client,
// engine server side) and about seven goroutines. At ~16k trajectories in
// flight the process ran out of file descriptors (issue 22). In process a
// turn holds no socket and one goroutine per hop.
//
// Semantics kept from a real server: the handler sees a server-side
// request (RequestURI, Host, RemoteAddr "inproc", a non-nil Body, a
// context cancelled when the client's is or when the client closes the
// response body); Flush sends what was written (SSE streams arrive as they
// are written); trailers declared in a "Trailer" header reach
// Response.Trailer at EOF; a Content-Type is sniffed when the handler
// sets none; a panic — http.ErrAbortHandler included — ends the response
// with an error, never the process. A handler that neither flushes nor
// returns is answered once it wrote more than 64 KiB (as a server's
// buffer would fill), so a large answer streams. The handler's output is
// buffered up to 1 MiB ahead of the reader; then its writes wait.
//
// Registry.Register is done by whoever owns the listener (localengine,
// the node's router), and undone before that listener closes, so a
// stopped server is reached — and refused — over the network as before.
//
// Only the standard library is imported.
package inproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Registry maps host:port to the handler served there. The zero value is
// ready to use; it is safe for concurrent use.
type Registry struct {
	mu sync.RWMutex
	h  map[string]http.Handler
}

// Default is the process's registry: the built-in engines and the node's
// router register here, and every Transport with a nil Registry looks
// here, so in-process peers are found without wiring.
var Default = &Registry{}

// Register serves h for requests to baseURL's host:port (an http:// URL
// or a bare host:port) until the returned function is called. A second
// registration of the same address replaces the first; unregistering the
// first then leaves the second in place.
func (r *Registry) Register(baseURL string, h http.Handler) (unregister func()) {
	host := hostOf(baseURL)
	r.mu.Lock()
	if r.h == nil {
		r.h = map[string]http.Handler{}
	}
	entry := &handlerBox{h}
	r.h[host] = entry
	r.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			if cur, ok := r.h[host].(*handlerBox); ok && cur == entry {
				delete(r.h, host)
			}
			r.mu.Unlock()
		})
	}
}

// handlerBox gives each registration its own identity (handlers such as
// http.HandlerFunc are not comparable).
type handlerBox struct{ h http.Handler }

func (b *handlerBox) ServeHTTP(w http.ResponseWriter, r *http.Request) { b.h.ServeHTTP(w, r) }

// Lookup returns the handler registered for host:port, or nil.
func (r *Registry) Lookup(host string) http.Handler {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if h, ok := r.h[host]; ok {
		return h
	}
	return nil
}

// Len is the number of registered addresses.
func (r *Registry) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.h)
}

// hostOf is the host:port of a base URL, or s itself when it has no
// scheme.
func hostOf(s string) string {
	if u, err := url.Parse(s); err == nil && u.Host != "" {
		return u.Host
	}
	return strings.TrimRight(s, "/")
}

// Transport serves http:// requests to registered addresses in process
// and sends every other request through Base.
type Transport struct {
	// Registry is where handlers are looked up; nil means Default.
	Registry *Registry
	// Base sends the requests no handler is registered for; nil means
	// http.DefaultTransport.
	Base http.RoundTripper

	served, passed atomic.Int64
}

var _ http.RoundTripper = (*Transport)(nil)

// Stats counts the requests served in process and passed to Base.
type Stats struct{ Served, Passed int64 }

// Stats returns the counters.
func (t *Transport) Stats() Stats { return Stats{Served: t.served.Load(), Passed: t.passed.Load()} }

func (t *Transport) registry() *Registry {
	if t.Registry != nil {
		return t.Registry
	}
	return Default
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL != nil && req.URL.Scheme == "http" {
		if h := t.registry().Lookup(req.URL.Host); h != nil {
			t.served.Add(1)
			return Serve(h, req)
		}
	}
	t.passed.Add(1)
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(req)
}

// CloseIdleConnections closes Base's idle connections (http.Client calls
// it through this interface).
func (t *Transport) CloseIdleConnections() {
	type closeIdler interface{ CloseIdleConnections() }
	if c, ok := t.Base.(closeIdler); ok {
		c.CloseIdleConnections()
	}
}

// NotAnsweredError: the caller's context ended before the in-process
// handler answered. Over a network that can mean a dead peer; in process
// the peer cannot be partitioned or crash apart from the caller (a
// stopped one is unregistered and refused over the network), so it means
// this process was too busy — a caller judging the peer's health (the
// router's probes) should not count it.
type NotAnsweredError struct {
	Method, URL string
	Err         error // the context's error
}

func (e *NotAnsweredError) Error() string {
	return "inproc: " + e.Method + " " + e.URL + ": not answered: " + e.Err.Error()
}

// Unwrap returns the context's error.
func (e *NotAnsweredError) Unwrap() error { return e.Err }

// InProcess marks the error as one of a peer in this process.
func (e *NotAnsweredError) InProcess() bool { return true }

// ErrHandlerPanic ends a response whose handler panicked.
var ErrHandlerPanic = errors.New("inproc: handler panicked")

// Serve runs h on req in a new goroutine and returns the response once the
// handler returned, flushed, or wrote more than a server's buffer. It
// follows the RoundTripper contract: req.Body is closed, and an error
// means no response.
func Serve(h http.Handler, req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	sreq := serverRequest(ctx, req)
	rw := newWriter(req, cancel)
	go rw.run(h, sreq, req.Body)
	select {
	case <-rw.ready:
	case <-req.Context().Done():
		rw.body.abandon()
		return nil, &NotAnsweredError{Method: req.Method, URL: req.URL.String(), Err: req.Context().Err()}
	}
	if rw.resp == nil {
		return nil, rw.err
	}
	return rw.resp, nil
}

// serverRequest is req as a server would hand it to a handler.
func serverRequest(ctx context.Context, req *http.Request) *http.Request {
	s := req.Clone(ctx)
	s.RequestURI = req.URL.RequestURI()
	s.URL = &url.URL{Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery}
	if s.Host == "" {
		s.Host = req.URL.Host
	}
	s.RemoteAddr = "inproc"
	s.Proto, s.ProtoMajor, s.ProtoMinor = "HTTP/1.1", 1, 1
	s.Close = false
	s.TLS = nil
	if s.Body == nil {
		s.Body = http.NoBody
	}
	if s.ContentLength > 0 && s.Header.Get("Content-Length") == "" {
		s.Header.Set("Content-Length", strconv.FormatInt(s.ContentLength, 10))
	}
	return s
}

// Buffer sizes: a handler that has not flushed is answered once it wrote
// flushAt bytes; its writes wait while more than aheadMax are unread.
const (
	flushAt  = 64 << 10
	aheadMax = 1 << 20
)

// writer is the handler's http.ResponseWriter and http.Flusher.
type writer struct {
	req    *http.Request
	cancel context.CancelFunc
	header http.Header
	body   *pipe

	wroteHeader bool
	status      int
	trailers    []string // declared in the Trailer header

	ready     chan struct{} // closed when resp (or err) is set
	readyOnce sync.Once
	resp      *http.Response
	err       error
}

func newWriter(req *http.Request, cancel context.CancelFunc) *writer {
	w := &writer{req: req, cancel: cancel, header: http.Header{}, ready: make(chan struct{})}
	w.body = &pipe{cancel: cancel}
	w.body.cond.L = &w.body.mu
	return w
}

// run serves the request and ends the response body.
func (w *writer) run(h http.Handler, sreq *http.Request, reqBody io.ReadCloser) {
	defer w.cancel()
	defer func() {
		if reqBody != nil {
			_ = reqBody.Close()
		}
	}()
	defer func() {
		p := recover()
		if p == nil {
			w.finish(nil)
			return
		}
		err := fmt.Errorf("%w: %v", ErrHandlerPanic, p)
		if p == http.ErrAbortHandler { //nolint:errorlint // the sentinel is panicked as is
			err = fmt.Errorf("inproc: handler aborted the response: %w", io.ErrUnexpectedEOF)
		}
		w.finish(err)
	}()
	h.ServeHTTP(w, sreq)
}

// Header implements http.ResponseWriter.
func (w *writer) Header() http.Header { return w.header }

// WriteHeader implements http.ResponseWriter: 1xx are ignored, a second
// call is ignored (as net/http does, without the log line).
func (w *writer) WriteHeader(code int) {
	if w.wroteHeader || (code >= 100 && code < 200) {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	w.wroteHeader, w.status = true, code
}

// Write implements http.ResponseWriter.
func (w *writer) Write(b []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.resp == nil && w.header.Get("Content-Type") == "" && len(b) > 0 && w.body.buffered() == 0 {
		w.header.Set("Content-Type", http.DetectContentType(b))
	}
	n, err := w.body.write(b)
	if err == nil && w.resp == nil && w.body.buffered() >= flushAt {
		w.commit(false)
	}
	return n, err
}

// Flush implements http.Flusher: the response (headers and what was
// written) goes to the client now.
func (w *writer) Flush() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.commit(false)
}

// commit hands the response to RoundTrip (once); final: the handler
// returned, so the body's length is known.
func (w *writer) commit(final bool) {
	if w.resp != nil {
		return
	}
	h := w.header.Clone()
	for _, v := range h.Values("Trailer") {
		for _, f := range strings.Split(v, ",") {
			if f = http.CanonicalHeaderKey(strings.TrimSpace(f)); f != "" {
				w.trailers = append(w.trailers, f)
			}
		}
	}
	h.Del("Trailer")
	resp := &http.Response{
		Status:     strconv.Itoa(w.status) + " " + http.StatusText(w.status),
		StatusCode: w.status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: w.body, ContentLength: -1, Request: w.req,
	}
	if len(w.trailers) > 0 {
		resp.Trailer = http.Header{}
		for _, k := range w.trailers {
			resp.Trailer[k] = nil
		}
	}
	switch {
	case w.req.Method == http.MethodHead || w.status == http.StatusNoContent || w.status == http.StatusNotModified:
		resp.ContentLength = 0
	case final && len(w.trailers) == 0:
		resp.ContentLength = int64(w.body.buffered())
	}
	w.resp = resp
	w.readyOnce.Do(func() { close(w.ready) })
}

// finish ends the response: it is complete (err nil) or broken.
func (w *writer) finish(err error) {
	if w.resp == nil && err == nil {
		if !w.wroteHeader {
			w.WriteHeader(http.StatusOK)
		}
		w.commit(true)
	}
	if w.resp == nil { // panicked before anything was sent
		w.err = err
		w.readyOnce.Do(func() { close(w.ready) })
		w.body.close(err)
		return
	}
	if err == nil && w.resp.Trailer != nil {
		tr := http.Header{}
		for _, k := range w.trailers {
			if vs, ok := w.header[k]; ok {
				tr[k] = append([]string(nil), vs...)
			}
		}
		for k, vs := range w.header {
			if strings.HasPrefix(k, http.TrailerPrefix) {
				tr[http.CanonicalHeaderKey(strings.TrimPrefix(k, http.TrailerPrefix))] = append([]string(nil), vs...)
			}
		}
		w.body.closeWithTrailer(w.resp, tr)
		return
	}
	w.body.close(err)
}

// pipe is the response body: the handler appends, the client reads.
type pipe struct {
	mu     sync.Mutex
	cond   sync.Cond
	buf    bytes.Buffer
	done   bool  // the handler finished
	err    error // what Read returns at the end (nil: io.EOF)
	closed bool  // the client closed the body
	cancel context.CancelFunc
}

func (p *pipe) buffered() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.buf.Len()
}

func (p *pipe) write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.buf.Len() > aheadMax && !p.closed {
		p.cond.Wait()
	}
	if p.closed {
		return 0, io.ErrClosedPipe
	}
	p.buf.Write(b)
	p.cond.Broadcast()
	return len(b), nil
}

// Read implements io.Reader.
func (p *pipe) Read(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.buf.Len() == 0 && !p.done && !p.closed {
		p.cond.Wait()
	}
	switch {
	case p.closed:
		return 0, errors.New("inproc: read on closed response body")
	case p.buf.Len() > 0:
		n, _ := p.buf.Read(b)
		p.cond.Broadcast()
		return n, nil
	case p.err != nil:
		return 0, p.err
	}
	return 0, io.EOF
}

// Close implements io.Closer: the handler's context is cancelled and its
// later writes fail.
func (p *pipe) Close() error {
	p.abandon()
	return nil
}

func (p *pipe) abandon() {
	p.mu.Lock()
	p.closed = true
	p.buf = bytes.Buffer{}
	p.cond.Broadcast()
	p.mu.Unlock()
	p.cancel()
}

func (p *pipe) close(err error) {
	p.mu.Lock()
	p.done, p.err = true, err
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *pipe) closeWithTrailer(resp *http.Response, tr http.Header) {
	p.mu.Lock()
	for k, vs := range tr {
		resp.Trailer[k] = vs
	}
	p.done = true
	p.cond.Broadcast()
	p.mu.Unlock()
}
