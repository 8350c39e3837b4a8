package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/asyncrl/asyncrl/actors/router/routertest"
	"github.com/rs/zerolog"
)

// The router logs one warning, not one per request, when a replica is
// unreachable for many requests in a row.
func TestUpstreamWarningsRateLimited(t *testing.T) {
	dead := routertest.Backend(t, func(http.ResponseWriter, *http.Request) {})
	url := dead.URL
	dead.Close()
	cfg := testConfig()
	cfg.Replicas = []string{url}
	cfg.MaxRetries = 0
	var lines atomic.Int64
	cfg.Logger = zerolog.New(writerFunc(func(p []byte) (int, error) {
		if strings.Contains(string(p), "upstream request failed") {
			lines.Add(1)
		}
		return len(p), nil
	}))
	h := start(t, cfg)
	for i := range 20 {
		resp := h.post("/v1/completions", fmt.Sprint("s", i), "{}")
		readAll(t, resp)
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if n := lines.Load(); n != 1 {
		t.Fatalf("%d warnings for 20 failures, want 1", n)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
