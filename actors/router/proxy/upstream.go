package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/asyncrl/asyncrl/internal/h1"
	"github.com/asyncrl/asyncrl/internal/rawio"
)

// upstream is the router's lean HTTP/1.1 client for plain-http replicas
// when no Transport is configured: the request is written and the
// response read on the handler's own goroutine, over a pooled keep-alive
// connection. http.Transport hands every request to two goroutines per
// connection (writeLoop, readLoop) and back over channels; on the hop
// those switches and their wake-ups cost about as much as the syscalls.
//
// It keeps what the Transport gave the router: keep-alive reuse (up to
// maxIdle idle connections per replica), a bounded dial, cancellation
// (the client going away aborts the upstream read, through
// context.AfterFunc, no goroutine), streaming bodies (resp.Body reads
// the connection as the replica writes), and one retry on a fresh
// connection when a reused idle one turns out closed before any byte of
// the answer (the body is in memory, so it is replayed exactly; the
// Transport does the same for a request with GetBody).
type upstream struct {
	dialer  net.Dialer
	maxIdle int

	mu     sync.Mutex
	idle   map[string][]*upConn // by host:port
	closed bool
}

type upConn struct {
	c    net.Conn
	br   *bufio.Reader
	bw   *bufio.Writer
	w    rawio.Writer // under bw: the request's last write waits for the answer
	host string
	// abortFn is abort, bound once (a method value per request allocated).
	abortFn func()
	// The head of the current answer when read without net/http
	// (readLean): rhead's slices alias raw.
	rhead h1.RespHead
	raw   []byte
	// The answer in flight and its bodies, reused for each request on
	// this connection (three allocations per request otherwise): the
	// connection goes back to the pool only when body is closed, and
	// nothing reads the answer after that.
	resp http.Response
	lean clBody
	body upBody
}

func newUpstream() *upstream {
	return &upstream{
		dialer:  net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second},
		maxIdle: 256,
		idle:    make(map[string][]*upConn),
	}
}

func (u *upstream) get(ctx context.Context, host string) (*upConn, bool, error) {
	u.mu.Lock()
	if l := u.idle[host]; len(l) > 0 {
		c := l[len(l)-1]
		u.idle[host] = l[:len(l)-1]
		u.mu.Unlock()
		return c, true, nil
	}
	u.mu.Unlock()
	nc, err := u.dialer.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, false, err
	}
	return newUpConn(nc, host, nil), false, nil
}

// newUpConn wraps a connection to host; its first reads return pre (an
// answer the loop front began to read).
func newUpConn(nc net.Conn, host string, pre []byte) *upConn {
	rc := rawio.New(nc)
	var rd io.Reader = rc
	if len(pre) > 0 {
		rd = io.MultiReader(bytes.NewReader(pre), rc)
	}
	c := &upConn{c: nc, br: bufio.NewReaderSize(rd, 16<<10), w: rawio.Writer{C: rc}, host: host}
	c.bw = bufio.NewWriterSize(&c.w, 16<<10)
	c.abortFn = c.abort
	return c
}

func (u *upstream) put(c *upConn) {
	u.mu.Lock()
	if !u.closed && len(u.idle[c.host]) < u.maxIdle {
		u.idle[c.host] = append(u.idle[c.host], c)
		u.mu.Unlock()
		return
	}
	u.mu.Unlock()
	_ = c.c.Close()
}

// CloseIdleConnections closes the pooled connections (Router.Shutdown);
// connections in use close when their request ends.
func (u *upstream) CloseIdleConnections() {
	u.mu.Lock()
	idle := u.idle
	u.idle = make(map[string][]*upConn)
	u.closed = true
	u.mu.Unlock()
	for _, l := range idle {
		for _, c := range l {
			_ = c.c.Close()
		}
	}
}

// roundTrip sends method uri with body to host (host:port) and returns the
// response; its Body returns the connection to the pool when read to the
// end and closed.
func (u *upstream) roundTrip(ctx context.Context, method, host, uri string, h headerWriter, body []byte) (*http.Response, error) {
	for try := 0; ; try++ {
		c, reused, err := u.get(ctx, host)
		if err != nil {
			return nil, err
		}
		stop := afterFunc(ctx, c.abortFn)
		resp, err := c.exchange(method, host, uri, h, body)
		if err == nil {
			c.body = upBody{rc: resp.Body, c: c, u: u, resp: resp, stop: stop}
			resp.Body = &c.body
			return resp, nil
		}
		stop()
		_ = c.c.Close()
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if !reused || try > 0 || !errors.Is(err, errNoAnswer) {
			return nil, err
		}
		// A reused idle connection the replica had closed: replay once on a new one.
	}
}

// afterFunc is context.AfterFunc, through the context's own AfterFunc
// method when it has one: the fast front's connCtx registers without an
// allocation, where context.AfterFunc allocates its own context and two
// closures per call even then.
func afterFunc(ctx context.Context, f func()) (stop func() bool) {
	if a, ok := ctx.(interface{ AfterFunc(func()) func() bool }); ok {
		return a.AfterFunc(f)
	}
	return context.AfterFunc(ctx, f)
}

// abort unblocks the connection's reads and writes (the client went away).
func (c *upConn) abort() { _ = c.c.SetDeadline(time.Unix(1, 0)) }

// errNoAnswer marks a failure before any byte of an answer was read.
var errNoAnswer = errors.New("proxy: upstream connection closed before answering")

func (c *upConn) exchange(method, host, uri string, h headerWriter, body []byte) (*http.Response, error) {
	if err := c.write(method, host, uri, h, body); err != nil {
		return nil, errors.Join(errNoAnswer, err)
	}
	if _, err := c.br.Peek(1); err != nil {
		return nil, errors.Join(errNoAnswer, err)
	}
	return c.read(method)
}

// headerWriter writes a request's end-to-end headers (inbound does).
type headerWriter interface{ writeHeaders(w *bufio.Writer) }

func (c *upConn) write(method, host, uri string, h headerWriter, body []byte) error {
	w := c.bw
	w.WriteString(method)
	w.WriteByte(' ')
	w.WriteString(uri)
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(host)
	w.WriteString("\r\n")
	h.writeHeaders(w)
	w.WriteString("Content-Length: ")
	w.Write(strconv.AppendInt(w.AvailableBuffer(), int64(len(body)), 10))
	w.WriteString("\r\n\r\n")
	w.Write(body)
	// The answer cannot come before the request: the last write is made
	// with the connection armed for reading, so reading the answer does
	// not start with a read that fails (rawio.WriteAwait).
	return c.w.FlushAwait(w)
}

// writeHeaders writes the client's end-to-end headers (as copyHeaders
// keeps them), minus those this hop sets itself: Host, Content-Length,
// and Expect (the body is already read; a 100-continue would only
// delay it).
func writeHeaders(w *bufio.Writer, h http.Header) {
	named := connectionNamed(h)
	for k, vs := range h {
		if isHopHeader(k) || k == "Host" || k == "Content-Length" || k == "Expect" || contains(named, k) {
			continue
		}
		for _, v := range vs {
			w.WriteString(k)
			w.WriteString(": ")
			w.WriteString(headerValue(v))
			w.WriteString("\r\n")
		}
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// headerValue drops CR and LF (net/http's server never passes them in a
// value; this keeps a header from ever splitting the request).
func headerValue(v string) string {
	if !strings.ContainsAny(v, "\r\n") {
		return v
	}
	return strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, v)
}

var methodStubs sync.Map // method → *http.Request, what http.ReadResponse reads of the request

func (c *upConn) read(method string) (*http.Response, error) {
	if method != http.MethodHead {
		if resp := c.readLean(); resp != nil {
			return resp, nil
		}
	}
	stub, ok := methodStubs.Load(method)
	if !ok {
		stub, _ = methodStubs.LoadOrStore(method, &http.Request{Method: method})
	}
	for {
		resp, err := http.ReadResponse(c.br, stub.(*http.Request))
		if err != nil {
			return nil, err
		}
		// 1xx (other than 101) are interim: the answer follows.
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			continue
		}
		return resp, nil
	}
}

// upBody is an upstream response body: the connection goes back to the
// pool when the body was read to its end without error and the replica
// did not ask to close; otherwise it is closed.
type upBody struct {
	rc     io.ReadCloser
	c      *upConn
	u      *upstream
	resp   *http.Response
	stop   func() bool
	eof    bool
	failed bool
	closed bool // Close is called by the one goroutine relaying the answer
}

func (b *upBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.eof = true
	} else if err != nil {
		b.failed = true
	}
	return n, err
}

func (b *upBody) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	_ = b.rc.Close()
	live := b.stop() // false: cancelled, the deadline is set
	if live && b.eof && !b.failed && !b.resp.Close {
		b.u.put(b.c) // the last touch: another request may take c now
		return nil
	}
	_ = b.c.c.Close()
	return nil
}

// readLean reads a plain answer with a Content-Length (what an engine's
// JSON answer is) without http.ReadResponse, whose header map and strings
// were half of the router's allocations per request: the head is parsed
// in place (h1.ParseResponse) and kept as bytes, resp.Header stays nil
// (leanHead, respHeader). Anything else — interim, chunked, bodiless or
// odd answers — returns nil before consuming a byte, for net/http.
func (c *upConn) readLean() *http.Response {
	for {
		buf, _ := c.br.Peek(c.br.Buffered())
		n, v := h1.ParseResponse(buf, &c.rhead)
		switch v {
		case h1.HandOff:
			return nil
		case h1.OK:
			c.raw = append(c.raw[:0], buf[:n]...)
			h1.ParseResponse(c.raw, &c.rhead) // the same head, now aliasing raw
			_, _ = c.br.Discard(n)
			c.lean = clBody{r: c.br, n: c.rhead.ContentLength}
			c.resp = http.Response{
				Status: statusString(c.rhead.Code), StatusCode: c.rhead.Code,
				Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
				ContentLength: c.rhead.ContentLength, Close: c.rhead.Close,
				Body: &c.lean,
			}
			return &c.resp
		}
		if c.br.Buffered() == c.br.Size() {
			return nil
		}
		if _, err := c.br.Peek(c.br.Buffered() + 1); err != nil {
			return nil // http.ReadResponse meets the same error
		}
	}
}

// statusStrings are the Status strings of the codes net/http names
// ("200 OK"), made once rather than per answer.
var statusStrings = func() (s [600]string) {
	for code := 100; code < len(s); code++ {
		if t := http.StatusText(code); t != "" {
			s[code] = strconv.Itoa(code) + " " + t
		}
	}
	return s
}()

func statusString(code int) string {
	if code >= 100 && code < len(statusStrings) && statusStrings[code] != "" {
		return statusStrings[code]
	}
	return strconv.Itoa(code) + " " + http.StatusText(code)
}

// clBody is a Content-Length body; the connection ending early is
// io.ErrUnexpectedEOF (a replica that died mid-answer), never a clean EOF.
type clBody struct {
	r *bufio.Reader
	n int64
}

func (b *clBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.r.Read(p)
	b.n -= int64(n)
	switch {
	case b.n == 0:
		err = io.EOF
	case err == io.EOF:
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *clBody) Close() error { return nil }

// leanHead is the head of an answer readLean read (resp.Header nil), or nil.
func leanHead(resp *http.Response) *h1.RespHead {
	if resp.Header != nil {
		return nil
	}
	if b, ok := resp.Body.(*upBody); ok {
		return &b.c.rhead
	}
	return nil
}

// respHeader is resp.Header, built from a lean answer's head on demand
// (the net/http front end needs the map; the fast one writes the bytes).
func respHeader(resp *http.Response) http.Header {
	lh := leanHead(resp)
	if lh == nil {
		return resp.Header
	}
	h := make(http.Header, len(lh.Headers))
	for _, f := range lh.Headers {
		k := http.CanonicalHeaderKey(string(f.Name))
		h[k] = append(h[k], string(f.Value))
	}
	resp.Header = h
	return h
}

const eventStream = "text/event-stream"

// isSSE reports whether the answer is text/event-stream.
func isSSE(resp *http.Response) bool {
	if lh := leanHead(resp); lh != nil {
		return isEventStream(lh)
	}
	return strings.HasPrefix(resp.Header.Get("Content-Type"), eventStream)
}

// isEventStream reports whether a parsed answer head is text/event-stream.
func isEventStream(h *h1.RespHead) bool {
	v, _ := h.Get("Content-Type")
	return len(v) >= len(eventStream) && string(v[:len(eventStream)]) == eventStream
}
