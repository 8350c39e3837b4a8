package front_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/router/front"
	"github.com/asyncrl/asyncrl/actors/router/routertest"
)

// A pipelined request that arrives while the previous one waits on its
// replica (for less than front.WatchDelay, so no background read takes its
// first byte) sits in the socket, not in br. An answer written with
// rawio.WriteAwait would wait for a readability edge that had already
// happened (RawRead's prepareRead drops it): the second answer never
// left. The fast front's answers are plain writes.
func TestFrontPipelinedDuringUpstreamWait(t *testing.T) {
	fastFronts(t, func(t *testing.T) {
		h := echo(t, front.WatchDelay/2)
		c, br := h.dial()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		routertest.Send(t, c, routertest.RawPost("a", "1"))
		time.Sleep(front.WatchDelay / 5) // the router has read a and waits on the replica
		routertest.Send(t, c, routertest.RawPost("b", "2"))
		for _, want := range []string{"a:1", "b:2"} {
			if _, body := routertest.ReadResp(t, br); body != want {
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
		h := echo(t, front.WatchDelay/2)
		c, br := h.dial()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		routertest.Send(t, c, routertest.RawPost("a", "1"))
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		if _, body := routertest.ReadResp(t, br); body != "a:1" {
			t.Fatalf("answer %q", body)
		}
		expectClosed(t, br, "half-closed client after its answer")
	})
}

// A client slower to read than the router is to answer: an answer larger
// than the sockets hold leaves in several writes (the loop front waits
// for writability), arrives whole, and the pipelined request behind it
// is answered after it, in order.
func TestFrontSlowReader(t *testing.T) {
	// 8 MiB: more than loopback's send buffers take at once, buffered
	// whole by the loop front (its limit raised for the test).
	fastFronts(t, func(t *testing.T) {
		big := strings.Repeat("z", 8<<20)
		a := routertest.Backend(t, func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			if string(b) == "big" { // with its length: the loop front buffers it (under LoopMaxAnswer)
				w.Header().Set("Content-Length", strconv.Itoa(len(big)))
				_, _ = io.WriteString(w, big)
				return
			}
			_, _ = w.Write(b)
		})
		cfg := testConfig(a)
		cfg.LoopMaxAnswer = 16 << 20
		h := start(t, cfg)
		// A small receive buffer, set before connecting (set after, the
		// window shrinks under the sender and TCP stalls for seconds).
		d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
			return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 8<<10) })
		}}
		c, err := d.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		routertest.Send(t, c, routertest.RawPost("s", "big")+routertest.RawPost("s", "after"))
		time.Sleep(200 * time.Millisecond) // the router's writes fill the sockets
		br := bufio.NewReaderSize(c, 1<<10)
		if _, body := routertest.ReadResp(t, br); body != big {
			t.Fatalf("big answer: %d bytes, want %d", len(body), len(big))
		}
		if _, body := routertest.ReadResp(t, br); body != "after" {
			t.Fatalf("pipelined answer %q", body)
		}
	})
}
