//go:build linux

package front_test

import (
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/router/front"
	"github.com/asyncrl/asyncrl/actors/router/routertest"
)

// loopWakes sums the event batches the harness's loops handled.
func loopWakes(h *harness) int64 { return h.srv.LoopWakes() }

// A request pipelined while the previous one waits 300 ms on its replica
// must not make the loop spin: level-triggered, unread input reports
// readiness on every wait unless the loop stops asking for it.
func TestLoopDoesNotSpinOnPipelinedInput(t *testing.T) {
	t.Run(front.Loop, func(t *testing.T) {
		h := echo(t, 300*time.Millisecond)
		c, br := h.dial()
		routertest.Send(t, c, routertest.RawPost("a", "1"))
		time.Sleep(20 * time.Millisecond) // the first request is with the replica
		before := loopWakes(h)
		routertest.Send(t, c, routertest.RawPost("a", "2"))
		if _, body := routertest.ReadResp(t, br); body != "a:1" {
			t.Fatalf("first answer %q", body)
		}
		// A handful of wakes (the input, the answer, housekeeping ticks);
		// a spinning loop makes tens of thousands in 300 ms.
		if n := loopWakes(h) - before; n > 100 {
			t.Fatalf("%d event batches while one request waited 300 ms: the loop spins", n)
		}
		if _, body := routertest.ReadResp(t, br); body != "a:2" {
			t.Fatalf("pipelined answer %q", body)
		}
	})
}
