package front

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asyncrl/asyncrl/internal/h1"
	"github.com/asyncrl/asyncrl/internal/rawio"
)

// fastConn is one client connection of the fast front. Its goroutine
// reads a request, forwards it and writes the answer, then the next.
type fastConn struct {
	s    *Server
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

func (s *Server) newFastConn(c net.Conn, hand *handoffListener) *fastConn {
	fc := &fastConn{s: s, c: c, hand: hand}
	fc.rw.C = rawio.New(c)
	fc.cr.c = fc.rw.C
	fc.br = readers.Get().(*bufio.Reader)
	fc.br.Reset(&fc.cr)
	fc.ctx = newConnCtx()
	fc.wcond.L = &fc.wmu
	fc.out.fc = fc
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		fc.release()
		return nil
	}
	s.conns[fc] = struct{}{}
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
	fc.s.mu.Lock()
	delete(fc.s.conns, fc)
	fc.s.mu.Unlock()
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
			fc.s.cfg.Logger.Error().Interface("panic", p).Msg("router front: request panicked")
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

// request serves one parsed request; false ends the connection. The
// request is admitted (or refused) on its head, before its size or body
// is looked at, and the overhead clock starts once its body is in (the
// loop front's next does the same).
func (fc *fastConn) request() bool {
	sh, h := fc.s.sh, &fc.head
	fc.out.reset()
	if !sh.Enter() {
		fc.out.closeAfter = true // the body stays unread
		sh.Refuse(&fc.out)
		return false
	}
	defer sh.Leave()
	if h.ContentLength > fc.s.cfg.MaxBodyBytes {
		fc.out.closeAfter = true // the body stays unread
		sh.TooLarge(&fc.out)
		return false
	}
	var body []byte
	if h.ContentLength > 0 {
		var err error
		body, err = ReadBody(&io.LimitedReader{R: fc.br, N: h.ContentLength}, h.ContentLength, fc.s.cfg.MaxBodyBytes)
		if err != nil || int64(len(body)) < h.ContentLength {
			sh.Count("", "read_body")
			return false // the client went away mid-body
		}
	}
	start := time.Now()
	fc.watch()
	sh.Forward(fc, &fc.out, body, start)
	fc.unwatch()
	return fc.out.ok()
}

// The fast front as an Inbound request.

// ReqCtx is Inbound's: it ends when the client goes away.
func (fc *fastConn) ReqCtx() context.Context { return fc.ctx }

// Method is Inbound's (h1.Parse accepts only GET and POST).
func (fc *fastConn) Method() string {
	if string(fc.head.Method) == http.MethodGet {
		return http.MethodGet
	}
	return http.MethodPost
}

// URI is Inbound's.
func (fc *fastConn) URI() string { return string(fc.head.Target) }

// Header is Inbound's.
func (fc *fastConn) Header(name string) string {
	v, _ := fc.head.Get(name)
	return string(v)
}

// WriteHeaders is upstream.HeaderWriter for the request being served.
func (fc *fastConn) WriteHeaders(w *bufio.Writer) {
	w.Write(appendFields(w.AvailableBuffer(), fc.head.Headers, forwarded))
}

// HTTPHeader is Inbound's.
func (fc *fastConn) HTTPHeader() http.Header {
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
