package front

import (
	"net"
	"net/http"
	"time"

	"github.com/asyncrl/asyncrl/actors/router/upstream"
	"github.com/asyncrl/asyncrl/internal/h1"
)

// adopted is an exchange the loop front hands to a goroutine: because its
// answer is not one the loop relays (streamed, chunked, large, interim:
// up is set), or because its replica is not one the loop reaches (not
// plain http: up is nil). It holds the client connection and the
// request's head and body, the bytes the client sent after it, the
// upstream connection and the answer's bytes read so far, and the
// request's routing state (forward's loop goes on from it).
type adopted struct {
	client, up net.Conn
	head, rest []byte
	body       []byte // the request's body (a retry sends it again)
	answer     []byte
	host       string
	rt         Routed
	upAt       time.Time
	closeAf    bool
}

// serveAdopted serves an adopted exchange, then the client connection as
// a fastConn: an answer in flight is relayed with the shell's relay
// (forward's rules for a failed or streamed answer); a request not yet
// sent goes on with forward's loop (Shell.Resume). It ends the request's
// admission (Leave) as Forward's callers do.
func (s *Server) serveAdopted(ex *adopted, hand *handoffListener) {
	defer func() {
		if p := recover(); p != nil && p != http.ErrAbortHandler {
			s.cfg.Logger.Error().Interface("panic", p).Msg("router loop front: relaying an answer panicked")
			_ = ex.client.Close()
			if ex.up != nil {
				_ = ex.up.Close()
			}
		}
	}()
	sh := s.sh
	fc := s.newFastConn(&prefixConn{Conn: ex.client, pre: ex.rest}, hand)
	if fc == nil { // shutting down
		_ = ex.client.Close()
		if ex.up != nil {
			_ = ex.up.Close()
		}
		sh.EndAttempt(ex.rt.D, ex.rt.Span)
		sh.Leave()
		return
	}
	fc.hbuf = ex.head
	h1.Parse(fc.hbuf, &fc.head)
	fc.out.reset()
	fc.out.closeAfter = fc.out.closeAfter || ex.closeAf
	fc.watch()
	if ex.up == nil {
		sh.Resume(fc, &fc.out, ex.body, ex.rt)
	} else {
		s.relayAdopted(fc, ex)
	}
	fc.unwatch()
	sh.Leave()
	if fc.out.ok() {
		fc.serve()
		return
	}
	fc.untrack()
	_ = fc.c.Close()
	fc.release()
}

// relayAdopted reads the answer of an adopted exchange on from the bytes
// the loop read and relays it to fc (Shell.Relay). Nothing has reached
// the client yet, so forward's retry rules still apply: an answer head
// that does not read, or a 503, is retried on another replica.
func (s *Server) relayAdopted(fc *fastConn, ex *adopted) {
	sh, rt := s.sh, ex.rt
	uc := upstream.NewConn(ex.up, ex.host, ex.answer)
	stop := upstream.AfterFunc(fc.ctx, uc.AbortFunc())
	resp, err := uc.Read(fc.Method())
	if err != nil {
		stop()
		_ = ex.up.Close()
		switch sh.SendFailed(rt.D, rt.Span, err, rt.Attempt, &rt.Preq, fc.ctx.Err() != nil, rt.Overhead) {
		case SendRetry:
			s.retryAdopted(fc, ex.body, rt)
		case SendFail:
			fc.out.Fail(http.StatusBadGateway, "upstream "+rt.D.Replica+" unreachable", 0)
		}
		return
	}
	s.cfg.Upstream.TrackBody(uc, resp, stop)
	if resp.StatusCode == http.StatusServiceUnavailable && sh.Retry503(rt.D, rt.Span, rt.Attempt, &rt.Preq) {
		DrainRetried(resp.Body) // as forward drains it
		s.retryAdopted(fc, ex.body, rt)
		return
	}
	sh.Relay(fc.ctx, &fc.out, resp, rt.D, rt.Span, ex.upAt, rt.Overhead)
}

// retryAdopted routes the next attempt of an adopted exchange whose
// attempt rt failed before any answer (its attempt closed, rt.Preq
// avoiding its replica) and goes on with forward's loop (Shell.Resume).
func (s *Server) retryAdopted(fc *fastConn, body []byte, rt Routed) {
	start := time.Now()
	rt.D, rt.Span = s.sh.Route(rt.Preq)
	rt.Attempt++
	rt.Overhead += time.Since(start)
	s.sh.Resume(fc, &fc.out, body, rt)
}
