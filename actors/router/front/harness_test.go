package front_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/asyncrl/asyncrl/actors/router/front"
	"github.com/asyncrl/asyncrl/actors/router/proxy"
)

// The fronts are tested through the router they serve: a real
// proxy.Router (its Serve runs this package's Server) in front of real
// backends, spoken to over raw connections.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// harness is a router served on 127.0.0.1 with the front its (sub)test
// names (fastFronts, eachFront).
type harness struct {
	t   *testing.T
	r   *proxy.Router
	srv *front.Server // the router's fronts
	url string
}

func testConfig(backends ...*httptest.Server) proxy.Config {
	cfg := proxy.DefaultConfig()
	cfg.HealthInterval = 0
	cfg.MetricsInterval = 0
	for _, b := range backends {
		cfg.Replicas = append(cfg.Replicas, b.URL)
	}
	return cfg
}

// fastFronts runs test against the fronts that read HTTP/1.1 themselves
// (fast and loop), as subtests named after them.
func fastFronts(t *testing.T, test func(t *testing.T)) {
	for _, f := range []string{front.Fast, front.Loop} {
		t.Run(f, test)
	}
}

// eachFront runs test against every front, net/http's included.
func eachFront(t *testing.T, test func(t *testing.T)) {
	for _, f := range []string{front.Fast, front.Loop, front.NetHTTP} {
		t.Run(f, test)
	}
}

// frontOf is the front a (sub)test runs under: the subtest in its name.
func frontOf(t *testing.T) string {
	for _, part := range strings.Split(t.Name(), "/") {
		if part == front.NetHTTP || part == front.Loop {
			return part
		}
	}
	return front.Fast
}

func start(t *testing.T, cfg proxy.Config) *harness {
	t.Helper()
	h := &harness{t: t}
	cfg.Front = frontOf(t)
	r, err := proxy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.r, h.srv = r, r.Fronts()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.url = "http://" + ln.Addr().String()
	served := make(chan error, 1)
	go func() { served <- r.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := r.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return h
}

// dial opens a raw connection to the harness's router.
func (h *harness) dial() (net.Conn, *bufio.Reader) {
	h.t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}
