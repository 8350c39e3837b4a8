package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/actors/router/proxy"
	"github.com/asyncrl/asyncrl/actors/trainer"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/internal/wiring"
	pol "github.com/asyncrl/asyncrl/policy"
)

// localEngine is one built-in engine serving on loopback.
type localEngine struct {
	name string
	e    *engine.Engine
	url  string
	srv  *http.Server
	done chan error
	once sync.Once
	// closed is set once stop began: calls that fail after it mean the
	// engine is gone, not that it failed.
	closed atomic.Bool
}

// stop shuts the engine's listener and loop down (idempotent): in-flight
// requests end with "abort", then the HTTP server closes.
func (le *localEngine) stop(ctx context.Context) error {
	var err error
	le.once.Do(func() {
		le.closed.Store(true)
		err = le.e.Shutdown(ctx)
		err = errors.Join(err, le.srv.Shutdown(ctx))
		select {
		case serr := <-le.done:
			if !errors.Is(serr, http.ErrServerClosed) {
				err = errors.Join(err, serr)
			}
		case <-ctx.Done():
			err = errors.Join(err, ctx.Err())
		}
	})
	return err
}

// startEngines starts count built-in engines serving m at version 0. They
// load later versions from checkpoint directories with wiring.LoadPolicy
// (the receivers' path). wrap, when set, wraps each engine's HTTP handler
// (a test hook that observes what an engine serves).
func startEngines(c config.EnginesConfig, m engine.Model, seed int64, log zerolog.Logger, wrap func(i int, e *engine.Engine, h http.Handler) http.Handler) ([]*localEngine, error) {
	var out []*localEngine
	for i := range c.Count {
		id := "engine-" + strconv.Itoa(i)
		e, err := engine.New(wiring.EngineConfig(c, c.ServedModelName, uint64(seed)+uint64(i)*0x9e3779b9), m,
			engine.WithLogger(log.With().Str("engine", id).Logger()), engine.WithLoader(wiring.LoadPolicy))
		if err != nil {
			stopEngines(out)
			return nil, fmt.Errorf("node: %s: %w", id, err)
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(c.ListenHost, "0"))
		if err != nil {
			e.Close()
			stopEngines(out)
			return nil, fmt.Errorf("node: %s: listen: %w", id, err)
		}
		h := e.Handler()
		if wrap != nil {
			h = wrap(i, e, h)
		}
		le := &localEngine{name: id, e: e, url: "http://" + ln.Addr().String(), done: make(chan error, 1),
			srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}
		go func() { le.done <- le.srv.Serve(ln) }()
		out = append(out, le)
	}
	return out, nil
}

func stopEngines(es []*localEngine) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, e := range es {
		_ = e.stop(ctx)
	}
}

// routerConfig maps the run config's router section onto proxy.Config
// (wiring.RunRouterConfig: the staleness budget follows the run's) for a
// router inside the node: replicas and logger are the node's, and it
// serves on a loopback listener the node binds.
func routerConfig(c config.Config, replicas []string, log zerolog.Logger) proxy.Config {
	pc := wiring.RunRouterConfig(c)
	pc.Replicas = replicas
	pc.ListenAddr = "127.0.0.1:0"
	pc.Logger = log
	return pc
}

// inProcPublisher is publisher.mode full: each new version is made live on
// the in-process engines from memory — each engine is paused (keep, abort
// or wait), gets the new BF16 serving copy and resumes; then the router
// learns every engine's version and the new minimum. It is also how a
// remote trainer's versions reach the engines.
type inProcPublisher struct {
	mode    string
	router  *proxy.Router
	mu      sync.Mutex
	engines []*localEngine
}

var _ trainer.Publisher = (*inProcPublisher)(nil)

func (p *inProcPublisher) Publish(ctx context.Context, m *pol.Model, version int64) error {
	p.mu.Lock()
	es := append([]*localEngine(nil), p.engines...)
	p.mu.Unlock()
	var errs []error
	live := 0
	for _, le := range es {
		if err := p.update(ctx, le, m, version); err != nil {
			if errors.Is(err, engine.ErrClosed) {
				continue // a stopped engine (killed in a chaos test) keeps its old version, out of rotation
			}
			errs = append(errs, fmt.Errorf("%s: %w", le.url, err))
			continue
		}
		live++
	}
	if live > 0 {
		if err := p.router.Apply(policy.SetMinVersion{Version: version}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (p *inProcPublisher) update(ctx context.Context, le *localEngine, m *pol.Model, version int64) error {
	if err := le.e.Pause(ctx, p.mode, false); err != nil {
		// A "wait" pause cut short (ctx ended) leaves the engine paused:
		// let it serve its current weights rather than nothing.
		le.e.Resume()
		return err
	}
	err := le.e.SetModel(m, version)
	le.e.Resume()
	if err != nil {
		return err
	}
	return p.router.Apply(policy.SetVersion{URL: le.url, Version: version})
}
