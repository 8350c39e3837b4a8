package routerbench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/asyncrl/asyncrl/actors/router/proxy"
	"github.com/asyncrl/asyncrl/engine"
)

// fleet is N built-in engines behind one proxy, all on loopback.
type fleet struct {
	engines []*engine.Engine
	urls    []string // engine base URLs, index = replica number
	router  *proxy.Router
	reg     *prometheus.Registry // the router's metrics
	url     string               // the router's base URL

	cancel context.CancelFunc
	wg     sync.WaitGroup
	srv    *http.Server
	errs   chan error
}

// startFleet starts one engine per config (each with its own registry and
// model) and a router in front of them built from pc (Replicas is set
// here). On error everything already started is stopped.
func startFleet(ecfgs []engine.Config, model func(i int) engine.Model, pc proxy.Config) (_ *fleet, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	f := &fleet{cancel: cancel, errs: make(chan error, len(ecfgs)+1)}
	defer func() {
		if err != nil {
			f.close()
		}
	}()
	for i, c := range ecfgs {
		e, err := engine.New(c, model(i))
		if err != nil {
			return nil, fmt.Errorf("routerbench: engine %d: %w", i, err)
		}
		f.engines = append(f.engines, e)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("routerbench: engine %d: %w", i, err)
		}
		f.urls = append(f.urls, "http://"+ln.Addr().String())
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			if err := e.Serve(ctx, ln); err != nil {
				f.errs <- fmt.Errorf("routerbench: engine %d: %w", i, err)
			}
		}()
	}
	f.reg = prometheus.NewRegistry()
	pc.Replicas = f.urls
	pc.Registerer = f.reg
	if f.router, err = proxy.New(pc); err != nil {
		return nil, fmt.Errorf("routerbench: router: %w", err)
	}
	if f.url, f.srv, err = serve(&f.wg, f.errs, f.router.Handler()); err != nil {
		return nil, err
	}
	return f, nil
}

// serve serves h on 127.0.0.1:0 until the server is shut down.
func serve(wg *sync.WaitGroup, errs chan<- error, h http.Handler) (string, *http.Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("routerbench: listen: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs <- err
		}
	}()
	return "http://" + ln.Addr().String(), srv, nil
}

// close stops the router, then the engines, and waits for every server
// goroutine. Safe on a partly started fleet.
func (f *fleet) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if f.srv != nil {
		_ = f.srv.Shutdown(ctx)
	}
	if f.router != nil {
		_ = f.router.Shutdown(ctx)
	}
	f.cancel() // ends every engine's Serve
	f.wg.Wait()
	for _, e := range f.engines {
		e.Close()
	}
}

// newClient returns an HTTP client for up to conns concurrent requests,
// never through an environment proxy.
func newClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        conns + 8,
		MaxIdleConnsPerHost: conns + 8,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}}
}
