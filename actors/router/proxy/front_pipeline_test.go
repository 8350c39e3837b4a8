package proxy

import (
	"io"
	"net"
	"testing"
	"time"
)

// A pipelined request that arrives while the previous one waits on its
// replica (for less than watchDelay, so no background read takes its
// first byte) sits in the socket, not in br. An answer written with
// rawio.WriteAwait would wait for a readability edge that had already
// happened (RawRead's prepareRead drops it): the second answer never
// left. The fast front's answers are plain writes.
func TestFrontPipelinedDuringUpstreamWait(t *testing.T) {
	fastFronts(t, func(t *testing.T) {
		h := echo(t, watchDelay/2)
		c, br := h.dial()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := io.WriteString(c, rawPost("a", "1")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(watchDelay / 5) // the router has read a and waits on the replica
		if _, err := io.WriteString(c, rawPost("b", "2")); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"a:1", "b:2"} {
			if _, body := readResp(t, br); body != want {
				t.Fatalf("answer %q, want %q", body, want)
			}
		}
	})
}

// A client that half-closes after its request reads the answer, then
// the router's close; the router must not wait for more (it did,
// until the idle timeout, when answers waited for readability).
func TestFrontHalfCloseAfterRequest(t *testing.T) {
	fastFronts(t, func(t *testing.T) {
		h := echo(t, watchDelay/2)
		c, br := h.dial()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := io.WriteString(c, rawPost("a", "1")); err != nil {
			t.Fatal(err)
		}
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		if _, body := readResp(t, br); body != "a:1" {
			t.Fatalf("answer %q", body)
		}
		expectClosed(t, br, "half-closed client after its answer")
	})
}
