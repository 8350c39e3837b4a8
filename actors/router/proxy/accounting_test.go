package proxy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/asyncrl/asyncrl/actors/router/routertest"
)

// overheadCount is how many requests the overhead histogram observed.
func overheadCount(t *testing.T, h *harness) uint64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "asyncrl_router_overhead_seconds" {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

// A replica that dies inside its answer's body (after a whole head with
// a Content-Length) is accounted for alike on every front, as forward's
// relay does it: the answer counted by its status code and its overhead
// observed (the head was in), one upstream_stream error, the replica's
// load released; the client never sees a whole answer. (The loop front,
// which buffers such an answer before writing anything, counted only the
// error: its requests_total and overhead missed every such answer.)
func TestReplicaDiesInsideAnswerBodyAccounting(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		a := routertest.Backend(t, func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			c, bw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = bw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"partial\":")
			_ = bw.Flush()
			_ = c.Close() // the engine dies mid-answer
		})
		h := start(t, testConfig(a))
		c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		routertest.Send(t, c, routertest.RawPost("s", `{"prompt":"p"}`))
		got, err := io.ReadAll(c) // the router cuts the connection
		if err != nil {
			t.Fatalf("reading until the router closes: %v (got %q)", err, got)
		}
		if resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(got)), nil); err == nil {
			if _, err := io.ReadAll(resp.Body); err == nil {
				t.Fatalf("client got a whole answer from a cut one: %q", got)
			}
		}
		routertest.Eventually(t, "in-flight released", func() bool { return h.r.Replicas()[0].InflightRequests == 0 })
		if got := testutil.ToFloat64(h.r.metrics.errors.WithLabelValues(a.URL, "upstream_stream")); got != 1 {
			t.Errorf("upstream_stream errors = %v, want 1", got)
		}
		if got := testutil.ToFloat64(h.r.metrics.requests.WithLabelValues(a.URL, "200")); got != 1 {
			t.Errorf("requests_total{code=200} = %v, want 1 (the answer's head was in)", got)
		}
		if n := overheadCount(t, h); n != 1 {
			t.Errorf("overhead observations = %d, want 1", n)
		}
	})
}
