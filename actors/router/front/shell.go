package front

import (
	"bufio"
	"context"
	"net/http"
	"time"

	"github.com/asyncrl/asyncrl/actors/router/policy"
)

// Shell is what a front needs from the routing shell (package proxy's
// Router implements it): admission, the route/retry loop and its steps,
// and the shell's counters and warnings. A front parses and writes bytes;
// every routing decision, retry rule, health observation, version span
// and metric is the shell's.
//
// Which goroutine calls what:
//   - Enter, Refuse, Leave, TooLarge, Count and Warn: any front, on any goroutine
//     (a connection's, a loop's). They take the shell's lock briefly and
//     never wait on I/O.
//   - Forward, Resume and Relay block for a whole exchange (they wait
//     on the replica and write the answer): the fast front calls Forward
//     on a connection's goroutine, the loop front Resume and Relay only
//     on the goroutine it hands an adopted exchange to — never on a loop.
//   - Prepare, Route, Unrouted, SendFailed, Retry503, Answered, Done,
//     StreamFailed, Abandon and EndAttempt are forward's loop cut into
//     steps, for the loop front, which calls them on its event loop: they
//     must not block (brief lock, counters, no I/O but the Failer's
//     write, which the loop buffers).
//
// A request admitted by Enter is ended by exactly one Leave. An attempt
// opened by Route (d.OK()) is closed by exactly one of EndAttempt,
// SendFailed, Retry503 (true), StreamFailed, Abandon, Resume, Relay, or
// Answered (its span) followed by Done (its load).
type Shell interface {
	// Enter admits a request (false: shutting down; answer Refuse). A
	// front calls it once the request's head is in, before anything else
	// about the request (its size, body) is looked at: a router shutting
	// down refuses every new request alike, and one admitted is waited
	// for by Shutdown, its body included.
	Enter() bool
	// Refuse answers a request Enter refused: 503 with Retry-After. The
	// front closes the connection after it (Connection: close), so the
	// client retries on a fresh connection, which a balancer can place on
	// another router.
	Refuse(out Failer)
	// Leave ends an admitted request.
	Leave()
	// TooLarge answers a body over the body limit (413) through out.
	TooLarge(out Failer)
	// Forward routes an admitted request whose body is read whole,
	// retries as the router's contract says and writes the answer to out.
	// start is when the body was in: the router's overhead (its metric)
	// counts from there, never the client's upload, as it never counts
	// the replica's answer.
	Forward(in Inbound, out Answer, body []byte, start time.Time)
	// Resume is Forward from a routing decision the loop front made
	// (Route) for a replica it does not reach itself (not plain http):
	// it sends the request there, retries and answers to out as Forward
	// does, and closes rt's attempt.
	Resume(in Inbound, out Answer, body []byte, rt Routed)
	// Relay writes the replica's answer resp to out (forward's relay: a
	// streamed answer flushed per chunk with the version trailers; a
	// failure mid-answer aborts out). It closes resp.Body and the
	// attempt. ctx ends when the client goes away.
	Relay(ctx context.Context, out Answer, resp *http.Response, d policy.Decision, span *Span,
		upAt time.Time, overhead time.Duration)

	// Prepare reads what routing needs from a request (its session key,
	// token estimates, prefix hashes) and returns it with the key.
	Prepare(h Headers, body []byte) (policy.Request, string)
	// Route asks the core for a replica and opens the attempt's version
	// span there (nil unless d.OK()).
	Route(preq policy.Request) (policy.Decision, *Span)
	// Unrouted answers a request the core placed nowhere (503, with
	// Retry-After when the session waits for its replica to catch up).
	Unrouted(out Failer, d policy.Decision, key string, overhead time.Duration)
	// SendFailed closes an attempt that failed with err before any byte
	// of its answer, counts it against the replica, and says what to do:
	// SendRetry (preq.Avoid names the replica), SendFail (answer 502; its
	// overhead is counted), SendGone (the client went away). attempt is
	// the attempt's index.
	SendFailed(d policy.Decision, span *Span, err error, attempt int, preq *policy.Request,
		clientGone bool, overhead time.Duration) SendOutcome
	// Retry503 decides on an answer 503 (its body read): true when
	// another replica is to be tried (a retry token was spent, the
	// attempt is closed and preq.Avoid names the replica); false: relay
	// the 503.
	Retry503(d policy.Decision, span *Span, attempt int, preq *policy.Request) bool
	// Answered counts the replica's answer (its head is in) as a passive
	// success and ends span, returning its final value.
	Answered(span *Span) Span
	// Done closes an attempt whose answer went out whole: its counters
	// (status code, overhead) and its load on the replica.
	Done(d policy.Decision, code int, overhead time.Duration)
	// StreamFailed closes an attempt whose replica failed after its
	// answer's head (status code) came in, before the answer went out:
	// the answer and overhead are counted as Relay counts an answer cut
	// mid-body, and the failure against the replica; the front cuts the
	// client connection.
	StreamFailed(d policy.Decision, span *Span, code int, overhead time.Duration, err error)
	// Abandon closes an attempt whose client went away while it waited.
	Abandon(d policy.Decision, span *Span)
	// EndAttempt closes an attempt that answered nothing to the client
	// (handed to another path, or dropped).
	EndAttempt(d policy.Decision, span *Span)

	// Count counts a failure of kind (the router's errors counter; replica
	// may be "").
	Count(replica, kind string)
	// Warn logs a failure, rate-limited per replica and message.
	Warn(replica, msg string, err error)
}

// SendOutcome is SendFailed's verdict.
type SendOutcome int

const (
	SendGone  SendOutcome = iota // the client went away: nothing to answer
	SendRetry                    // try another replica (preq.Avoid has this one)
	SendFail                     // answer 502
)

// Routed is where forward's loop stands when the loop front hands it a
// request (Shell.Resume): the request as Prepare returned it, the
// decision Route made for attempt Attempt and its span, and the router's
// time on the request so far (Overhead, that routing included).
type Routed struct {
	Preq     policy.Request
	Key      string
	D        policy.Decision
	Span     *Span
	Attempt  int
	Overhead time.Duration
}

// Span is the range of weight versions one replica was recorded as
// serving while an attempt was on it (the X-Asyncrl-Weight-Version-*
// headers). The shell opens, widens and ends it under its lock; a front
// holds the pointer only as the attempt's handle and reads the copies
// the shell returns (Answered), never the pointee.
type Span struct {
	Replica  string
	Min, Max int64
}

// Headers looks up a request header: its first value (any case), "" if
// none.
type Headers interface {
	Header(name string) string
}

// Inbound is a request as the route/retry loop needs it, whichever front
// read it.
type Inbound interface {
	Headers
	// ReqCtx ends when the client goes away.
	ReqCtx() context.Context
	Method() string
	// URI is the request target (path and query) to send upstream.
	URI() string
	// WriteHeaders writes the end-to-end headers for the lean upstream
	// client (upstream.HeaderWriter): hop-by-hop fields, Host,
	// Content-Length and Expect left out.
	WriteHeaders(w *bufio.Writer)
	// HTTPHeader returns the headers for a configured Transport.
	HTTPHeader() http.Header
}

// Failer writes a local vLLM-style JSON error; retryAfter (seconds) adds
// a Retry-After header when > 0.
type Failer interface {
	Fail(code int, msg string, retryAfter int)
}

// Answer is where the route/retry loop answers, whichever front writes it.
type Answer interface {
	Failer
	// Head writes the replica's status and end-to-end headers plus the
	// router's (replica, versions; the version trailers declared when
	// trailers is set); with flush, the head and every later write are
	// flushed to the client at once.
	Head(resp *http.Response, replica string, vs Span, trailers, flush bool) error
	Write(p []byte) error
	// End finishes the body; vs, when not nil, goes out as the trailers.
	End(vs *Span)
	// Abort cuts the client connection: the replica failed mid-response.
	Abort()
}
