package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// signalContext ends on SIGINT or SIGTERM, or when parent ends.
func signalContext(parent context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
}

// listen binds addr and says where on w, so scripts (and tests) that pass
// port 0 learn the real address: "asyncrl <what>: listening on http://ADDR".
func listen(w io.Writer, what, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	fmt.Fprintf(w, "asyncrl %s: listening on http://%s\n", what, ln.Addr())
	return ln, nil
}

// serveHTTP serves h on ln until ctx ends, then shuts down gracefully
// within grace.
func serveHTTP(ctx context.Context, ln net.Listener, h http.Handler, grace time.Duration) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// serveMetrics serves reg at /metrics on addr in the background until ctx
// ends; an empty addr serves nothing.
func serveMetrics(ctx context.Context, w io.Writer, addr string, reg *prometheus.Registry) (<-chan error, error) {
	done := make(chan error, 1)
	if addr == "" {
		close(done)
		return done, nil
	}
	ln, err := listen(w, "metrics", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	go func() { done <- serveHTTP(ctx, ln, mux, 2*time.Second) }()
	return done, nil
}
