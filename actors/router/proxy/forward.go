package proxy

import (
	"bufio"
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

	"github.com/asyncrl/asyncrl/actors/router/front"
	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/actors/router/upstream"
)

// ReplicaHeader names the replica that served a response.
const ReplicaHeader = front.ReplicaHeader

func copyHeaders(dst, src http.Header) {
	// Only a Connection header names extra hop-by-hop fields; without one
	// (the common case) no set of dropped names is built per request.
	named := front.ConnectionNamed(src)
	for k, vs := range src {
		if front.IsHopHeader(k) || slices.Contains(named, k) {
			continue
		}
		dst[k] = append(dst[k][:0:0], vs...)
	}
}

// httpIn and httpOut are the net/http front end's request and answer
// (front.Inbound, front.Answer).
type httpIn struct{ r *http.Request }

func (in httpIn) ReqCtx() context.Context      { return in.r.Context() }
func (in httpIn) Method() string               { return in.r.Method }
func (in httpIn) URI() string                  { return in.r.URL.RequestURI() }
func (in httpIn) Header(name string) string    { return in.r.Header.Get(name) }
func (in httpIn) WriteHeaders(w *bufio.Writer) { writeHeaders(w, in.r.Header) }
func (in httpIn) HTTPHeader() http.Header      { return in.r.Header }

type httpOut struct {
	w  http.ResponseWriter
	rc *http.ResponseController // set when flushing
}

func (o *httpOut) Fail(code int, msg string, retryAfter int) {
	if retryAfter > 0 {
		o.w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
	writeError(o.w, code, msg)
}

func (o *httpOut) Head(resp *http.Response, replica string, vs front.Span, trailers, flush bool) error {
	h := o.w.Header()
	copyHeaders(h, upstream.Header(resp))
	h.Set(ReplicaHeader, replica)
	setVersionHeaders(h, vs)
	if trailers {
		h.Set("Trailer", VersionMinHeader+", "+VersionMaxHeader)
	}
	o.w.WriteHeader(resp.StatusCode)
	if flush {
		o.rc = http.NewResponseController(o.w)
		return o.rc.Flush()
	}
	return nil
}

func (o *httpOut) Write(p []byte) error {
	if _, err := o.w.Write(p); err != nil {
		return err
	}
	if o.rc != nil {
		return o.rc.Flush()
	}
	return nil
}

func (o *httpOut) End(vs *front.Span) {
	if vs != nil {
		setVersionHeaders(o.w.Header(), *vs) // declared in Trailer: sent as trailers
	}
}

func (o *httpOut) Abort() { panic(http.ErrAbortHandler) }

// proxy is the net/http front end: it reads the body and forwards. It
// admits on the head and starts the overhead clock once the body is in,
// as the other fronts do (front's doc.go).
func (r *Router) proxy(w http.ResponseWriter, req *http.Request) {
	out := &httpOut{w: w}
	if !r.enter() {
		w.Header().Set("Connection", "close") // net/http closes after the answer
		r.refuse(out)
		return
	}
	defer r.leave()

	body, err := front.ReadBody(http.MaxBytesReader(w, req.Body, r.cfg.MaxBodyBytes), req.ContentLength, r.cfg.MaxBodyBytes)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			r.tooLarge(out)
			return
		}
		r.metrics.errors.WithLabelValues("", "read_body").Inc()
		out.Fail(http.StatusBadRequest, "reading request body: "+err.Error(), 0)
		return
	}
	r.forward(httpIn{req}, out, body, time.Now())
}

// refuse answers a request that came while the router shuts down (enter
// refused it): 503 with Retry-After, which every front sends with
// Connection: close. The router does not come back on that connection;
// the client's retry, on a new one, may reach another router (or this
// one restarted).
func (r *Router) refuse(out front.Failer) {
	r.metrics.errors.WithLabelValues("", "shutting_down").Inc()
	out.Fail(http.StatusServiceUnavailable, "router is shutting down", r.retryAfter())
}

// retryAfter is Config.RetryAfter in whole seconds, at least 1 (the
// Retry-After of the router's own temporary 503s).
func (r *Router) retryAfter() int {
	return max(int(r.cfg.RetryAfter.Round(time.Second)/time.Second), 1)
}

// tooLarge answers a body over MaxBodyBytes.
func (r *Router) tooLarge(out front.Failer) {
	r.metrics.errors.WithLabelValues("", "body_too_large").Inc()
	out.Fail(http.StatusRequestEntityTooLarge, "request body exceeds "+strconv.FormatInt(r.cfg.MaxBodyBytes, 10)+" bytes", 0)
}

// forward routes one admitted request (body read whole) to the replica
// the core chooses, retries as the contract says, and relays the answer:
// the one route/retry loop every front shares (the loop front steps it
// itself, and hands forwardFrom the requests it cannot send).
func (r *Router) forward(in front.Inbound, out front.Answer, body []byte, start time.Time) {
	preq, key := r.prepare(in.Header, body)
	d, span := r.route(preq)
	r.forwardFrom(in, out, body, front.Routed{Preq: preq, Key: key, D: d, Span: span, Overhead: time.Since(start)})
}

// forwardFrom is forward's route/retry loop from a routing decision on
// (rt: the decision of attempt rt.Attempt, rt.Overhead of router time
// spent so far, its routing included).
func (r *Router) forwardFrom(in front.Inbound, out front.Answer, body []byte, rt front.Routed) {
	preq, d, span, overhead := rt.Preq, rt.D, rt.Span, rt.Overhead
	for attempt := rt.Attempt; ; attempt++ {
		if !d.OK() {
			r.unrouted(out, d, rt.Key, overhead)
			return
		}
		resp, err := r.send(in, d.Replica, body)
		upstreamAt := time.Now()
		if err != nil {
			switch r.sendFailed(d, span, err, attempt, &preq, in.ReqCtx().Err() != nil, overhead) {
			case front.SendRetry:
				d, span, overhead = r.reroute(preq, overhead)
				continue
			case front.SendFail:
				out.Fail(http.StatusBadGateway, "upstream "+d.Replica+" unreachable", 0)
			}
			return
		}
		if resp.StatusCode == http.StatusServiceUnavailable && r.retry503(d, span, attempt, &preq) {
			// Drained so the upstream connection is reused; the attempt
			// is already closed (as the loop front closes it before it
			// releases its upstream connection).
			front.DrainRetried(resp.Body)
			d, span, overhead = r.reroute(preq, overhead)
			continue
		}
		r.relay(in.ReqCtx(), out, resp, d, span, upstreamAt, overhead)
		return
	}
}

// reroute routes a retry: the decision, and overhead with its routing's
// time added.
func (r *Router) reroute(preq policy.Request, overhead time.Duration) (policy.Decision, *front.Span, time.Duration) {
	start := time.Now()
	d, span := r.route(preq)
	return d, span, overhead + time.Since(start)
}

// prepare reads what routing needs from a request: the core's request
// (session key, token estimates, prefix hashes) and the key. header is
// the request's header lookup (a method value: it does not escape, so it
// costs no allocation, and no interface conversion at the call).
func (r *Router) prepare(header func(name string) string, body []byte) (policy.Request, string) {
	info := parseRequest(header, body, r.cfg.DefaultDecodeTokens, r.cfg.PrefixBytes)
	return policy.Request{
		SessionKey: info.key.Value, HashOnly: info.key.HashOnly(),
		PromptTokens: info.promptTokens, ExpectedDecodeTokens: info.decodeTokens, PrefixHash: info.prefixHash,
		PrefixBlocks: info.prefixBlocks,
	}, info.key.Value
}

// unrouted answers a request the core placed nowhere: 503, with
// Retry-After when the session is gated on its replica catching up.
func (r *Router) unrouted(out front.Failer, d policy.Decision, key string, overhead time.Duration) {
	r.metrics.overhead.Observe(overhead.Seconds())
	if d.Outcome == policy.OutcomeGated {
		out.Fail(http.StatusServiceUnavailable, "session "+key+" waits for replica "+d.From+" to catch up; retry later",
			r.retryAfter())
		return
	}
	r.metrics.errors.WithLabelValues("", "no_replica").Inc()
	out.Fail(http.StatusServiceUnavailable, "no replica available", 0)
}

// sendFailed closes the attempt on d.Replica that failed with err before
// any answer (its span and load), counts it against the replica's health
// and decides, by the retry rules of the contract, whether to try another
// (front.SendFail: the caller answers 502; its overhead is counted here).
func (r *Router) sendFailed(d policy.Decision, span *front.Span, err error, attempt int, preq *policy.Request,
	clientGone bool, overhead time.Duration) front.SendOutcome {
	if clientGone {
		r.abandon(d, span)
		return front.SendGone
	}
	r.endAttempt(d, span)
	r.upstreamFailed(d.Replica, err)
	r.metrics.errors.WithLabelValues(d.Replica, "upstream_connect").Inc()
	r.warn(d.Replica, "upstream request failed", err)
	if r.mayRetry(attempt) {
		r.metrics.retries.WithLabelValues("connect").Inc()
		preq.Avoid = append(preq.Avoid, d.Replica)
		return front.SendRetry
	}
	r.metrics.overhead.Observe(overhead.Seconds())
	return front.SendFail
}

// mayRetry is the retry rule for a request's attempt (its index) whose
// failure allows a retry (a failed send, a 503): fewer than MaxRetries
// retries so far, and a token spent from the retry budget.
func (r *Router) mayRetry(attempt int) bool {
	return attempt < r.cfg.MaxRetries && r.spendRetryToken()
}

// retry503 decides on an answer 503 of d.Replica (every front: forward,
// and the loop front's Shell.Retry503): when mayRetry allows, it closes
// the attempt, counts the 503 and the retry, names the replica in
// preq.Avoid and returns true (the caller discards the answer and tries
// another replica); false: the 503 is relayed.
func (r *Router) retry503(d policy.Decision, span *front.Span, attempt int, preq *policy.Request) bool {
	if !r.mayRetry(attempt) {
		return false
	}
	r.endAttempt(d, span)
	r.metrics.request(d.Replica, http.StatusServiceUnavailable)
	r.metrics.retries.WithLabelValues("status_503").Inc()
	preq.Avoid = append(preq.Avoid, d.Replica)
	return true
}

// send forwards the request with body to replica: through the lean
// upstream client for a plain-http replica when no Transport was
// configured, else through the Transport.
func (r *Router) send(in front.Inbound, replica string, body []byte) (*http.Response, error) {
	if r.up != nil {
		if host, ok := strings.CutPrefix(replica, "http://"); ok && !strings.Contains(host, "/") {
			return r.up.RoundTrip(in.ReqCtx(), in.Method(), host, in.URI(), in, body)
		}
	}
	out, err := http.NewRequestWithContext(in.ReqCtx(), in.Method(), replica+in.URI(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	copyHeaders(out.Header, in.HTTPHeader())
	out.ContentLength = int64(len(body))
	out.Host = ""
	return r.tr.RoundTrip(out)
}

// relayBufs recycles relay's 32 KiB copy buffers: allocating one per
// request was most of the router's 49 KB/op (BENCHMARKS.md). A pointer
// to the slice is pooled so Put does not allocate.
var relayBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// relay copies the upstream response to the client. A response that may
// stream — text/event-stream, or no declared Content-Length (chunked) —
// is flushed at its headers and at every chunk, so SSE tokens reach the
// client as the engine produces them. A response with a declared length
// (a plain JSON answer) is not flushed: the front end writes its head
// and body in one write at the end instead of one for the head and one
// per chunk (flushing every response cost a fifth of the router's CPU
// under load: one more write syscall per request).
//
// The version headers are computed when the upstream's response headers
// arrive. For a non-streaming answer that is the end of generation, so
// they cover the whole request. A streaming answer (text/event-stream)
// sends its headers before the first token, so its headers cover only
// routing to the first byte; the final span, up to the end of the
// stream, follows as HTTP trailers of the same names (declared in a
// Trailer header; a client that ignores trailers sees the start values).
func (r *Router) relay(ctx context.Context, out front.Answer, resp *http.Response, d policy.Decision, span *front.Span,
	upstreamAt time.Time, overhead time.Duration) {
	defer resp.Body.Close()
	defer r.done(d)
	sse := upstream.IsSSE(resp)
	streaming := sse && resp.ContentLength < 0
	flush := sse || resp.ContentLength < 0
	vs := r.answered(span, !streaming)
	herr := out.Head(resp, d.Replica, vs, streaming, flush)
	r.countAnswer(d.Replica, resp.StatusCode, overhead+time.Since(upstreamAt))
	if herr != nil {
		r.endStream(span, streaming)
		return // client gone; closing the body ends the upstream request
	}

	bp := relayBufs.Get().(*[]byte)
	defer relayBufs.Put(bp)
	buf := *bp
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if werr := out.Write(buf[:n]); werr != nil {
				r.endStream(span, streaming)
				return // client gone; closing the body ends the upstream request
			}
		}
		if rerr == io.EOF {
			var tr *front.Span
			if streaming {
				s := r.span(span, true)
				tr = &s
			}
			out.End(tr)
			return
		}
		if rerr != nil {
			r.endStream(span, streaming)
			if ctx.Err() != nil {
				r.countClientGone(d.Replica)
				return
			}
			// The replica died mid-response. Headers may be out, so the
			// only honest signal is to abort the client connection.
			r.streamBroke(d.Replica, rerr)
			out.Abort()
			return
		}
	}
}

// The attempt-closing steps below are forward's and relay's, and the
// loop front's Shell steps (serve.go) are made of them alone, so a
// change to a label, a count or the health rule reaches every front.

// countAnswer counts an answer of replica with status code whose head is
// going out to the client, and the router's overhead on it.
func (r *Router) countAnswer(replica string, code int, overhead time.Duration) {
	r.metrics.overhead.Observe(overhead.Seconds())
	r.metrics.request(replica, code)
}

// answerDone closes an attempt whose answer went out whole at once (the
// loop front's): it is counted (countAnswer) and its load on the replica
// released, where relay releases it after the body's last byte. Its span
// was ended by answered.
func (r *Router) answerDone(d policy.Decision, code int, overhead time.Duration) {
	r.countAnswer(d.Replica, code, overhead)
	r.done(d)
}

// streamBroke counts a replica's failure after its answer's head
// against it: the upstream_stream error, a passive health failure, a
// warning. The caller cuts the client connection and closes the attempt.
func (r *Router) streamBroke(replica string, err error) {
	r.metrics.errors.WithLabelValues(replica, "upstream_stream").Inc()
	r.passiveFailure(replica)
	r.warn(replica, "upstream failed mid-response", err)
}

// streamFailed closes an attempt whose replica failed after its answer's
// head (status code) came in and before the answer went out: counted as
// relay counts it (the answer and its overhead, then streamBroke), its
// span ended and its load released.
func (r *Router) streamFailed(d policy.Decision, span *front.Span, code int, overhead time.Duration, err error) {
	r.countAnswer(d.Replica, code, overhead)
	r.streamBroke(d.Replica, err)
	r.endAttempt(d, span)
}

// countClientGone counts a request whose client went away while its
// attempt on replica was under way.
func (r *Router) countClientGone(replica string) {
	r.metrics.errors.WithLabelValues(replica, "client_gone").Inc()
}

// abandon closes an attempt whose client went away before any answer:
// its span ends, its load is released, client_gone is counted.
func (r *Router) abandon(d policy.Decision, span *front.Span) {
	r.endAttempt(d, span)
	r.countClientGone(d.Replica)
}

// endStream closes a streaming answer's version span that ends without
// its trailers.
func (r *Router) endStream(span *front.Span, streaming bool) {
	if streaming {
		r.span(span, true)
	}
}

// route asks the core for a replica and, when it names one, opens the
// request's version span there (in the same critical section, so no
// version change falls between the two).
func (r *Router) route(preq policy.Request) (policy.Decision, *front.Span) {
	r.mu.Lock()
	d := r.core.Route(time.Now(), preq)
	var span *front.Span
	if d.OK() {
		span = r.openSpan(d.Replica)
	}
	r.mu.Unlock()
	r.metrics.decision(d.Outcome)
	return d, span
}

// endAttempt closes an attempt on d.Replica that answered nothing to the
// client (failed, retried, abandoned): its version span ends and its
// load on the replica is released.
func (r *Router) endAttempt(d policy.Decision, span *front.Span) {
	r.span(span, true)
	r.done(d)
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
