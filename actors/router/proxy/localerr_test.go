package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/actors/router/routertest"
)

// dialFails fails every call to one replica with a dial error.
type dialFails struct {
	host string
	err  error
	base http.RoundTripper
}

func (d dialFails) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host == d.host {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", d.err)}
	}
	return d.base.RoundTrip(r)
}

// A client-side dial error — the router's own process out of file
// descriptors — does not mark the engine unhealthy, neither passively
// nor through a probe; a refused connection (the engine's fault) does.
func TestLocalDialErrorsDoNotMarkReplicasUnhealthy(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		for _, tc := range []struct {
			err       syscall.Errno
			unhealthy bool
		}{{syscall.EMFILE, false}, {syscall.ENFILE, false}, {syscall.EADDRNOTAVAIL, false}, {syscall.ECONNREFUSED, true}} {
			t.Run(tc.err.Error(), func(t *testing.T) {
				good := routertest.Named(t, "good", nil)
				victim := routertest.Named(t, "victim", nil)
				cfg := DefaultConfig()
				cfg.MetricsInterval = 0
				cfg.HealthInterval = time.Hour // passive detection only, probes below by hand
				cfg.Policy.FailThreshold = 2
				cfg.Policy.Policy = policy.RoundRobin
				cfg.Replicas = []string{victim.URL, good.URL}
				cfg.Transport = dialFails{host: victim.Listener.Addr().String(), err: tc.err, base: &http.Transport{Proxy: nil}}
				h := start(t, cfg)
				for i := 0; i < 6; i++ {
					resp := h.post("/v1/completions", "", "{}")
					resp.Body.Close()
				}
				h.r.checkHealth(context.Background())
				h.r.checkHealth(context.Background())
				for _, v := range h.r.Replicas() {
					if v.URL == victim.URL && v.Healthy == tc.unhealthy {
						t.Fatalf("%v: healthy %v, want %v", tc.err, v.Healthy, !tc.unhealthy)
					}
				}
			})
		}
		if !localResourceError(&net.OpError{Op: "dial", Err: os.NewSyscallError("socket", syscall.EMFILE)}) || localResourceError(errors.New("EOF")) {
			t.Fatal("localResourceError misclassifies")
		}
	})
}

// inProcessSlow answers /health only after the probe's deadline, with the
// error an in-process transport (internal/inproc) gives then.
type inProcessSlow struct{}

type notAnswered struct{ err error }

func (e notAnswered) Error() string   { return "not answered: " + e.err.Error() }
func (e notAnswered) Unwrap() error   { return e.err }
func (e notAnswered) InProcess() bool { return true }

func (inProcessSlow) RoundTrip(r *http.Request) (*http.Response, error) {
	<-r.Context().Done()
	return nil, notAnswered{r.Context().Err()}
}

// A probe of an engine in this process that times out (the process is
// busy) leaves it healthy; the same timeout from over the network counts.
func TestInProcessProbeTimeoutIsNotAFailure(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		for _, inProc := range []bool{true, false} {
			cfg := DefaultConfig()
			cfg.MetricsInterval = 0
			cfg.HealthInterval = time.Hour
			cfg.HealthTimeout = 10 * time.Millisecond
			cfg.Policy.FailThreshold = 2
			cfg.Replicas = []string{"http://engine-0.inproc:80"}
			cfg.Transport = inProcessSlow{}
			if !inProc {
				cfg.Transport = dialFails{host: "engine-0.inproc:80", err: syscall.ETIMEDOUT, base: nil}
			}
			h := start(t, cfg)
			for range 3 {
				h.r.checkHealth(context.Background())
			}
			if got := h.r.Replicas()[0].Healthy; got != inProc {
				t.Errorf("in process %v: healthy %v after 3 timed-out probes", inProc, got)
			}
		}
	})
}
