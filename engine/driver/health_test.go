package driver

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A /health that does not answer in its half of the probe's time, on an
// engine that is not SGLang (/get_model_info answers 404 at once), must
// come back as the /health timeout, not as a verdict: the router skips a
// probe whose error is its own overload (an in-process replica's timeout,
// issue 22) and would otherwise mark a busy replica unhealthy because the
// fallback route, which the engine does not serve, answered.
func TestProbeHealthReportsTheHealthTimeoutWhenTheFallbackIsNotSGLang(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			<-r.Context().Done() // slower than the probe allows
			return
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	ok, err := ProbeHealth(ctx, http.DefaultTransport, srv.URL)
	if ok {
		t.Fatal("healthy without any 200")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the /health timeout (context.DeadlineExceeded)", err)
	}
}

// A /health that answers (503 at once) is the verdict: unhealthy, no error.
func TestProbeHealthAnsweredUnhealthyIsAVerdict(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ok, err := ProbeHealth(ctx, http.DefaultTransport, srv.URL)
	if ok || err != nil {
		t.Fatalf("ProbeHealth = %v, %v; want false, nil", ok, err)
	}
}
