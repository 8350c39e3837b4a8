package front

import (
	"bufio"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"

	"github.com/asyncrl/asyncrl/actors/router/upstream"
	"github.com/asyncrl/asyncrl/internal/h1"
)

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

// Fail is Failer's: a local error answer, whole in one write.
func (o *fastOut) Fail(code int, msg string, retryAfter int) {
	b := appendError(o.scratch[:0], code, msg, retryAfter, o.closeAfter)
	o.scratch = b
	w := o.writer()
	_, _ = w.Write(b)
	o.finish()
}

// appendError appends a local vLLM-style JSON error answer (Fail).
func appendError(b []byte, code int, msg string, retryAfter int, closeAfter bool) []byte {
	body, _ := json.Marshal(ErrorValue(code, msg))
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
func appendRelayedHead(b []byte, code int, lh *h1.RespHead, h http.Header, replica string, vs Span) []byte {
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

// Head is Answer's: the head leaves with the body (one write) unless
// flush.
func (o *fastOut) Head(resp *http.Response, replica string, vs Span, trailers, flush bool) error {
	b := appendRelayedHead(o.scratch[:0], resp.StatusCode, upstream.LeanHead(resp), resp.Header, replica, vs)
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
	named := ConnectionNamed(h)
	for k, vs := range h {
		if IsHopHeader(k) || k == "Content-Length" || k == ReplicaHeader || k == VersionMinHeader ||
			k == VersionMaxHeader || slices.Contains(named, k) {
			continue
		}
		for _, v := range vs {
			b = h1.AppendHeader(b, k, v)
		}
	}
	return b
}

// appendVersions appends the version header (or trailer) lines of vs.
func appendVersions(b []byte, vs Span) []byte {
	b = append(b, VersionMinHeader+": "...)
	b = strconv.AppendInt(b, vs.Min, 10)
	b = append(b, "\r\n"+VersionMaxHeader+": "...)
	b = strconv.AppendInt(b, vs.Max, 10)
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

// Write is Answer's: re-chunked when the answer is, flushed when Head
// said so.
func (o *fastOut) Write(p []byte) error {
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

// End is Answer's: the last chunk with the version trailers, then the
// answer leaves.
func (o *fastOut) End(vs *Span) {
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

// Abort is Answer's: it drops what is buffered and closes the
// connection: the client sees it end before the answer does, never a
// clean short answer.
func (o *fastOut) Abort() {
	if o.bw != nil {
		o.bw.Reset(nil)
		writers.Put(o.bw)
		o.bw = nil
	}
	o.err = errAborted
	_ = o.fc.c.Close()
}

var errAborted = errors.New("front: answer aborted")
