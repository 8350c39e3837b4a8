package front

import (
	"net"
	"net/http"
	"time"

	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/actors/router/upstream"
	"github.com/asyncrl/asyncrl/internal/h1"
)

// adopted is an exchange the loop front hands to a goroutine: because its
// answer is not one the loop relays (streamed, chunked, large, interim:
// up is set), or because its replica is not one the loop reaches (not
// plain http: up is nil, body is set). It holds the client connection and
// the request's head, the bytes the client sent after it, the upstream
// connection and the answer's bytes read so far, and the request's
// routing state.
type adopted struct {
	client, up net.Conn
	head, rest []byte
	body       []byte // the request's body, for Resume
	answer     []byte
	host       string
	rt         Routed // d, span, overhead; all of it for Resume
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
// the loop read and relays it to fc (Shell.Relay).
func (s *Server) relayAdopted(fc *fastConn, ex *adopted) {
	sh, d, span := s.sh, ex.rt.D, ex.rt.Span
	uc := upstream.NewConn(ex.up, ex.host, ex.answer)
	stop := upstream.AfterFunc(fc.ctx, uc.AbortFunc())
	resp, err := uc.Read(fc.Method())
	if err != nil {
		stop()
		_ = ex.up.Close()
		// Bytes of the answer were read: no retry.
		noRetry := policy.Request{}
		if sh.SendFailed(d, span, err, NoRetry, &noRetry, fc.ctx.Err() != nil, ex.rt.Overhead) == SendFail {
			fc.out.Fail(http.StatusBadGateway, "upstream "+d.Replica+" unreachable", 0)
		}
		return
	}
	s.cfg.Upstream.TrackBody(uc, resp, stop)
	sh.Relay(fc.ctx, &fc.out, resp, d, span, ex.upAt, ex.rt.Overhead)
}
