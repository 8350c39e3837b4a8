package proxy

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/router/front"
)

// benchHeaders is a request's header lookup (front.Headers), as the loop
// front's connection is.
type benchHeaders struct{ session string }

func (h *benchHeaders) Header(name string) string {
	if strings.EqualFold(name, "X-Session-ID") {
		return h.session
	}
	return ""
}

// BenchmarkShellSteps measures what the loop front's split from the
// shell added per request: the shell's steps for one answered request
// (Enter, Prepare, Route, Answered, Done, Leave) called on the Router
// directly, as the loop did when it lived in this package ("direct"),
// and through the front.Shell interface, as it does now ("shell"). No
// I/O: the difference is the interface dispatch, on a machine's noise
// far below the hop benchmarks'.
func BenchmarkShellSteps(b *testing.B) {
	cfg := DefaultConfig()
	cfg.HealthInterval, cfg.MetricsInterval = 0, 0
	cfg.Replicas = []string{"http://127.0.0.1:1", "http://127.0.0.1:2"}
	r, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Shutdown(b.Context())
	body := []byte(`{"prompt":"` + strings.Repeat("tok ", 256) + `","max_tokens":16}`)
	h := &benchHeaders{session: "s1"}
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		cpu := startCPU()
		defer cpu.report(b)
		for b.Loop() {
			if !r.enter() {
				b.Fatal("not admitted")
			}
			preq, _ := r.prepare(h.Header, body)
			d, span := r.route(preq)
			r.answered(span, true)
			r.answerDone(d, http.StatusOK, time.Microsecond)
			r.leave()
		}
	})
	b.Run("shell", func(b *testing.B) {
		b.ReportAllocs()
		var sh front.Shell = (*frontShell)(r)
		cpu := startCPU()
		defer cpu.report(b)
		for b.Loop() {
			if !sh.Enter() {
				b.Fatal("not admitted")
			}
			preq, _ := sh.Prepare(h, body)
			d, span := sh.Route(preq)
			sh.Answered(span)
			sh.Done(d, http.StatusOK, time.Microsecond)
			sh.Leave()
		}
	})
}
