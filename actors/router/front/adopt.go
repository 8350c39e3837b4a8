package front

import (
	"net"
	"net/http"
	"time"

	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/actors/router/upstream"
	"github.com/asyncrl/asyncrl/internal/h1"
)

// adopted is an exchange the loop front hands to a goroutine because its
// answer is not one the loop relays (streamed, chunked, large, interim):
// the client connection and the request's head, the bytes the client
// sent after it, the upstream connection and the answer's bytes read so
// far, and the request's routing state.
type adopted struct {
	client, up net.Conn
	head, rest []byte
	answer     []byte
	host       string
	d          policy.Decision
	span       *Span
	upAt       time.Time
	overhd     time.Duration
	closeAf    bool
}

// relayAdopted relays an adopted exchange's answer with the shell's
// relay (forward's rules for a failed or streamed answer), then serves
// the client connection as a fastConn. It ends the request's admission
// (Leave) as Forward's callers do.
func (s *Server) relayAdopted(ex *adopted, hand *handoffListener) {
	defer func() {
		if p := recover(); p != nil && p != http.ErrAbortHandler {
			s.cfg.Logger.Error().Interface("panic", p).Msg("router loop front: relaying an answer panicked")
			_ = ex.client.Close()
			_ = ex.up.Close()
		}
	}()
	sh := s.sh
	fc := s.newFastConn(&prefixConn{Conn: ex.client, pre: ex.rest}, hand)
	if fc == nil { // shutting down
		_ = ex.client.Close()
		_ = ex.up.Close()
		sh.EndAttempt(ex.d, ex.span)
		sh.Leave()
		return
	}
	fc.hbuf = ex.head
	h1.Parse(fc.hbuf, &fc.head)
	fc.out.reset()
	fc.out.closeAfter = fc.out.closeAfter || ex.closeAf
	uc := upstream.NewConn(ex.up, ex.host, ex.answer)
	fc.watch()
	stop := upstream.AfterFunc(fc.ctx, uc.AbortFunc())
	resp, err := uc.Read(fc.Method())
	if err != nil {
		stop()
		_ = ex.up.Close()
		// Bytes of the answer were read: no retry.
		noRetry := policy.Request{}
		if sh.SendFailed(ex.d, ex.span, err, NoRetry, &noRetry, fc.ctx.Err() != nil, ex.overhd) == SendFail {
			fc.out.Fail(http.StatusBadGateway, "upstream "+ex.d.Replica+" unreachable", 0)
		}
	} else {
		s.cfg.Upstream.TrackBody(uc, resp, stop)
		sh.Relay(fc.ctx, &fc.out, resp, ex.d, ex.span, ex.upAt, ex.overhd)
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
