package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/asyncrl/asyncrl/actors/router/policy"
)

// ReplicaHeader names the replica that served a response.
const ReplicaHeader = "X-Asyncrl-Replica"

// hopHeaders are hop-by-hop headers (RFC 9110 §7.6.1); never forwarded.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func copyHeaders(dst, src http.Header) {
	// Only a Connection header names extra hop-by-hop fields; without one
	// (the common case) no set of dropped names is built per request.
	var named []string
	for _, v := range src.Values("Connection") {
		for _, f := range strings.Split(v, ",") {
			named = append(named, http.CanonicalHeaderKey(strings.TrimSpace(f)))
		}
	}
	for k, vs := range src {
		if isHopHeader(k) || slices.Contains(named, k) {
			continue
		}
		dst[k] = append(dst[k][:0:0], vs...)
	}
}

func isHopHeader(k string) bool {
	for _, h := range hopHeaders {
		if k == h {
			return true
		}
	}
	return false
}

// proxy forwards one request to the replica the core chooses.
func (r *Router) proxy(w http.ResponseWriter, req *http.Request) {
	start := time.Now()
	if !r.enter() {
		writeError(w, http.StatusServiceUnavailable, "router is shutting down")
		return
	}
	defer r.leave()

	body, err := readBody(http.MaxBytesReader(w, req.Body, r.cfg.MaxBodyBytes), req.ContentLength, r.cfg.MaxBodyBytes)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			r.metrics.errors.WithLabelValues("", "body_too_large").Inc()
			writeError(w, http.StatusRequestEntityTooLarge,
				"request body exceeds "+strconv.FormatInt(r.cfg.MaxBodyBytes, 10)+" bytes")
			return
		}
		r.metrics.errors.WithLabelValues("", "read_body").Inc()
		writeError(w, http.StatusBadRequest, "reading request body: "+err.Error())
		return
	}
	info := parseRequest(req.Header, body, r.cfg.DefaultDecodeTokens, r.cfg.PrefixBytes)
	key := info.key
	preq := policy.Request{
		SessionKey: key.Value, HashOnly: key.HashOnly(),
		PromptTokens: info.promptTokens, ExpectedDecodeTokens: info.decodeTokens, PrefixHash: info.prefixHash,
		PrefixBlocks: info.prefixBlocks,
	}
	overhead := time.Duration(0)

	for attempt := 0; ; attempt++ {
		d, span := r.route(preq)
		if !d.OK() {
			overhead += time.Since(start)
			r.metrics.overhead.Observe(overhead.Seconds())
			if d.Outcome == policy.OutcomeGated {
				w.Header().Set("Retry-After", strconv.Itoa(max(int(r.cfg.RetryAfter.Round(time.Second)/time.Second), 1)))
				writeError(w, http.StatusServiceUnavailable, "session "+key.Value+" waits for replica "+d.From+" to catch up; retry later")
				return
			}
			r.metrics.errors.WithLabelValues("", "no_replica").Inc()
			writeError(w, http.StatusServiceUnavailable, "no replica available")
			return
		}
		overhead += time.Since(start)
		resp, err := r.send(req, d.Replica, body)
		upstreamAt := time.Now()
		if err != nil {
			r.span(span, true)
			r.done(d)
			if req.Context().Err() != nil { // the client went away; nothing to answer
				r.metrics.errors.WithLabelValues(d.Replica, "client_gone").Inc()
				return
			}
			r.upstreamFailed(d.Replica, err)
			r.metrics.errors.WithLabelValues(d.Replica, "upstream_connect").Inc()
			r.log.Warn().Err(err).Str("replica", d.Replica).Msg("upstream request failed")
			if attempt < r.cfg.MaxRetries && r.spendRetryToken() {
				r.metrics.retries.WithLabelValues("connect").Inc()
				preq.Avoid = append(preq.Avoid, d.Replica)
				start = time.Now()
				continue
			}
			r.metrics.overhead.Observe(overhead.Seconds())
			writeError(w, http.StatusBadGateway, "upstream "+d.Replica+" unreachable")
			return
		}
		if resp.StatusCode == http.StatusServiceUnavailable && attempt < r.cfg.MaxRetries && r.spendRetryToken() {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			r.span(span, true)
			r.done(d)
			r.metrics.request(d.Replica, http.StatusServiceUnavailable)
			r.metrics.retries.WithLabelValues("status_503").Inc()
			preq.Avoid = append(preq.Avoid, d.Replica)
			start = time.Now()
			continue
		}
		r.relay(req.Context(), w, resp, d, span, upstreamAt, overhead)
		return
	}
}

// send forwards the request with body to replica: through the lean
// upstream client for a plain-http replica when no Transport was
// configured, else through the Transport.
func (r *Router) send(req *http.Request, replica string, body []byte) (*http.Response, error) {
	if r.up != nil {
		if host, ok := strings.CutPrefix(replica, "http://"); ok && !strings.Contains(host, "/") {
			return r.up.roundTrip(req.Context(), req.Method, host, req.URL.RequestURI(), req.Header, body)
		}
	}
	out, err := http.NewRequestWithContext(req.Context(), req.Method, replica+req.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	copyHeaders(out.Header, req.Header)
	out.ContentLength = int64(len(body))
	out.Host = ""
	return r.tr.RoundTrip(out)
}

// readBody reads the whole body into one buffer sized from the declared
// Content-Length (capped by the body limit), instead of io.ReadAll's
// doubling from 512 bytes, which for a 70 KB multi-turn prompt
// allocates and copies eight times.
func readBody(rd io.Reader, contentLength, limit int64) ([]byte, error) {
	if contentLength <= 0 {
		return io.ReadAll(rd)
	}
	buf := make([]byte, 0, min(contentLength, limit)+1) // +1: see EOF without regrowing
	for {
		if len(buf) == cap(buf) { // longer than declared: let append grow it
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// relayBufs recycles relay's 32 KiB copy buffers: allocating one per
// request was most of the router's 49 KB/op (BENCHMARKS.md). A pointer
// to the slice is pooled so Put does not allocate.
var relayBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// relay copies the upstream response to the client. A response that may
// stream — text/event-stream, or no declared Content-Length (chunked) —
// is flushed at its headers and at every chunk, so SSE tokens reach the
// client as the engine produces them. A response with a declared length
// (a plain JSON answer) is not flushed: net/http writes its headers and
// body in one write at the end of the handler instead of one for the
// headers and one per chunk (flushing every response cost a fifth of the
// router's CPU under load: one more write syscall per request).
//
// The version headers are computed when the upstream's response headers
// arrive. For a non-streaming answer that is the end of generation, so
// they cover the whole request. A streaming answer (text/event-stream)
// sends its headers before the first token, so its headers cover only
// routing to the first byte; the final span, up to the end of the
// stream, follows as HTTP trailers of the same names (declared in a
// Trailer header; a client that ignores trailers sees the start values).
func (r *Router) relay(ctx context.Context, w http.ResponseWriter, resp *http.Response, d policy.Decision, span *versionSpan,
	upstreamAt time.Time, overhead time.Duration) {
	defer resp.Body.Close()
	defer r.done(d)
	sse := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	streaming := sse && resp.ContentLength < 0
	flush := sse || resp.ContentLength < 0
	vs := r.answered(span, !streaming)
	if streaming {
		defer func() { setVersionHeaders(w.Header(), r.span(span, true)) }() // the trailers
	}
	copyHeaders(w.Header(), resp.Header)
	w.Header().Set(ReplicaHeader, d.Replica)
	setVersionHeaders(w.Header(), vs)
	if streaming {
		w.Header().Set("Trailer", VersionMinHeader+", "+VersionMaxHeader)
	}
	w.WriteHeader(resp.StatusCode)
	var rc *http.ResponseController
	if flush {
		rc = http.NewResponseController(w)
		_ = rc.Flush()
	}
	r.metrics.overhead.Observe((overhead + time.Since(upstreamAt)).Seconds())
	r.metrics.request(d.Replica, resp.StatusCode)

	bp := relayBufs.Get().(*[]byte)
	defer relayBufs.Put(bp)
	buf := *bp
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return // client gone; ctx cancellation ends the upstream request
			}
			if rc != nil {
				if err := rc.Flush(); err != nil {
					return
				}
			}
		}
		if rerr == io.EOF {
			return
		}
		if rerr != nil {
			if ctx.Err() != nil {
				r.metrics.errors.WithLabelValues(d.Replica, "client_gone").Inc()
				return
			}
			// The replica died mid-response. Headers may be out, so the
			// only honest signal is to abort the client connection.
			r.metrics.errors.WithLabelValues(d.Replica, "upstream_stream").Inc()
			r.passiveFailure(d.Replica)
			r.log.Warn().Err(rerr).Str("replica", d.Replica).Msg("upstream failed mid-response")
			panic(http.ErrAbortHandler)
		}
	}
}

// route asks the core for a replica and, when it names one, opens the
// request's version span there (in the same critical section, so no
// version change falls between the two).
func (r *Router) route(preq policy.Request) (policy.Decision, *versionSpan) {
	r.mu.Lock()
	d := r.core.Route(time.Now(), preq)
	var span *versionSpan
	if d.OK() {
		span = r.openSpan(d.Replica)
	}
	r.mu.Unlock()
	r.metrics.decision(d.Outcome)
	return d, span
}

func (r *Router) done(d policy.Decision) {
	r.mu.Lock()
	r.core.Done(time.Now(), d.Replica, d.Tokens)
	r.mu.Unlock()
}

// enter admits a request unless shutting down, and earns the retry
// budget's share for it in the same critical section (the router's one
// mutex was taken about seven times per request; at 8,192 trajectories in
// flight 82 % of all lock waiting was on it — issue 22).
func (r *Router) enter() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing {
		return false
	}
	r.inflight++
	r.budget.Request()
	return true
}

func (r *Router) leave() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inflight--
	if r.closing && r.inflight == 0 {
		close(r.drained)
	}
}

func (r *Router) spendRetryToken() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.budget.Retry()
}
