package upstream

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/asyncrl/asyncrl/internal/h1"
	"github.com/asyncrl/asyncrl/internal/rawio"
)

// Conn is one keep-alive connection to a replica, used by one request at
// a time.
type Conn struct {
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

// NewConn wraps a connection to host; its first reads return pre (an
// answer the proxy's loop front began to read).
func NewConn(nc net.Conn, host string, pre []byte) *Conn {
	rc := rawio.New(nc)
	var rd io.Reader = rc
	if len(pre) > 0 {
		rd = io.MultiReader(bytes.NewReader(pre), rc)
	}
	c := &Conn{c: nc, br: bufio.NewReaderSize(rd, 16<<10), w: rawio.Writer{C: rc}, host: host}
	c.bw = bufio.NewWriterSize(&c.w, 16<<10)
	c.abortFn = c.abort
	return c
}

// AbortFunc is the connection's abort, bound once (a method value per
// request allocates): it unblocks the connection's reads and writes, for
// AfterFunc when the client goes away.
func (c *Conn) AbortFunc() func() { return c.abortFn }

// abort unblocks the connection's reads and writes (the client went away).
func (c *Conn) abort() { _ = c.c.SetDeadline(time.Unix(1, 0)) }

// ErrNoAnswer marks a failure before any byte of an answer was read: the
// request may be replayed on another connection.
var ErrNoAnswer = errors.New("upstream: connection closed before answering")

func (c *Conn) exchange(method, host, uri string, h HeaderWriter, body []byte) (*http.Response, error) {
	if err := c.write(method, host, uri, h, body); err != nil {
		return nil, errors.Join(ErrNoAnswer, err)
	}
	if _, err := c.br.Peek(1); err != nil {
		return nil, errors.Join(ErrNoAnswer, err)
	}
	return c.Read(method)
}

// HeaderWriter writes a request's end-to-end headers, each line ending
// in CRLF (the proxy's inbound request does): everything but the request
// line, Host and Content-Length, which the client writes.
type HeaderWriter interface{ WriteHeaders(w *bufio.Writer) }

func (c *Conn) write(method, host, uri string, h HeaderWriter, body []byte) error {
	w := c.bw
	w.WriteString(method)
	w.WriteByte(' ')
	w.WriteString(uri)
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(host)
	w.WriteString("\r\n")
	h.WriteHeaders(w)
	w.WriteString("Content-Length: ")
	w.Write(strconv.AppendInt(w.AvailableBuffer(), int64(len(body)), 10))
	w.WriteString("\r\n\r\n")
	w.Write(body)
	// The answer cannot come before the request: the last write is made
	// with the connection armed for reading, so reading the answer does
	// not start with a read that fails (rawio.WriteAwait).
	return c.w.FlushAwait(w)
}

var methodStubs sync.Map // method → *http.Request, what http.ReadResponse reads of the request

// Read reads the answer to a request of method (interim 1xx answers
// skipped); a plain answer with a Content-Length is read lean (see the
// package doc).
func (c *Conn) Read(method string) (*http.Response, error) {
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
	c      *Conn
	u      *Client
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
func (c *Conn) readLean() *http.Response {
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
