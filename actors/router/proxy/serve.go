package proxy

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/asyncrl/asyncrl/actors/router/front"
	"github.com/asyncrl/asyncrl/actors/router/policy"
)

// Front ends Serve can run (Config.Front); package front runs them.
const (
	// FrontFast is the router's own HTTP/1.1 server for the proxied path:
	// the request head parsed in place without net/http's maps, the
	// answer relayed as bytes, no per-request background read or
	// deadline. Everything it does not serve (admin, finish_session,
	// chunked or Expect requests, HTTP/1.0, odd or oversized heads) is
	// handed to net/http's server on the same connection.
	FrontFast = front.Fast
	// FrontNetHTTP serves Handler with net/http's server.
	FrontNetHTTP = front.NetHTTP
	// FrontLoop (the default) serves the fast front's plain requests
	// from event loops, one per P (Linux; elsewhere it is FrontFast).
	FrontLoop = front.Loop
)

// Serve serves the router on ln with the front end Config.Front names
// until Shutdown; it then returns http.ErrServerClosed. Shutdown refuses
// new requests with 503 while in-flight ones finish, then closes the
// listeners and the connections. The in-process path (internal/inproc)
// uses Handler instead.
func (r *Router) Serve(ln net.Listener) error { return r.fronts.Serve(ln, r.cfg.Front) }

// Fronts is the server Serve runs its fronts on (package front), e.g.
// for the fronts' own tests to read its state; Shutdown stops it.
func (r *Router) Fronts() *front.Server { return r.fronts }

// frontShell is the Router as package front's Shell: the fronts' view of
// the routing shell (its methods are documented there). A conversion, not
// a wrapper: (*frontShell)(r) allocates nothing, and each method is one
// Router method — the very step forward and relay (forward.go) take for
// the fast and net/http fronts, so no rule, count or label of the loop
// front's can drift from theirs.
type frontShell Router

var _ front.Shell = (*frontShell)(nil)

func (s *frontShell) r() *Router { return (*Router)(s) }

func (s *frontShell) Enter() bool               { return s.r().enter() }
func (s *frontShell) Refuse(out front.Failer)   { s.r().refuse(out) }
func (s *frontShell) Leave()                    { s.r().leave() }
func (s *frontShell) TooLarge(out front.Failer) { s.r().tooLarge(out) }

func (s *frontShell) Forward(in front.Inbound, out front.Answer, body []byte, start time.Time) {
	s.r().forward(in, out, body, start)
}

func (s *frontShell) Resume(in front.Inbound, out front.Answer, body []byte, rt front.Routed) {
	s.r().forwardFrom(in, out, body, rt)
}

func (s *frontShell) Relay(ctx context.Context, out front.Answer, resp *http.Response, d policy.Decision,
	span *front.Span, upAt time.Time, overhead time.Duration) {
	s.r().relay(ctx, out, resp, d, span, upAt, overhead)
}

func (s *frontShell) Prepare(h front.Headers, body []byte) (policy.Request, string) {
	return s.r().prepare(h.Header, body)
}

func (s *frontShell) Route(preq policy.Request) (policy.Decision, *front.Span) {
	return s.r().route(preq)
}

func (s *frontShell) Unrouted(out front.Failer, d policy.Decision, key string, overhead time.Duration) {
	s.r().unrouted(out, d, key, overhead)
}

func (s *frontShell) SendFailed(d policy.Decision, span *front.Span, err error, attempt int, preq *policy.Request,
	clientGone bool, overhead time.Duration) front.SendOutcome {
	return s.r().sendFailed(d, span, err, attempt, preq, clientGone, overhead)
}

func (s *frontShell) Retry503(d policy.Decision, span *front.Span, attempt int, preq *policy.Request) bool {
	return s.r().retry503(d, span, attempt, preq)
}

func (s *frontShell) Answered(span *front.Span) front.Span { return s.r().answered(span, true) }

func (s *frontShell) Done(d policy.Decision, code int, overhead time.Duration) {
	s.r().answerDone(d, code, overhead)
}

func (s *frontShell) StreamFailed(d policy.Decision, span *front.Span, code int, overhead time.Duration, err error) {
	s.r().streamFailed(d, span, code, overhead, err)
}

func (s *frontShell) Abandon(d policy.Decision, span *front.Span) { s.r().abandon(d, span) }

func (s *frontShell) EndAttempt(d policy.Decision, span *front.Span) { s.r().endAttempt(d, span) }

func (s *frontShell) Count(replica, kind string) {
	s.r().metrics.errors.WithLabelValues(replica, kind).Inc()
}

func (s *frontShell) Warn(replica, msg string, err error) { s.r().warn(replica, msg, err) }
