// Package localengine runs built-in engines (engine.Engine) inside a node's
// process, each serving its OpenAI-compatible API on its own listener. The
// pipeline of `asyncrl run` starts engines.count of them; an engine host
// (cluster/enginehost) starts them for the holder of the trainer lease.
package localengine

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

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/internal/inproc"
	"github.com/asyncrl/asyncrl/wiring"
)

// Engine is one built-in engine serving on a listener of this process.
type Engine struct {
	// Name is the engine's name on the bus and in the publisher
	// ("engine-<i>" in a run; an engine host renames its engines).
	Name string
	// E is the engine itself.
	E *engine.Engine
	// URL is the engine's base URL.
	URL string

	srv  *http.Server
	done chan error
	// unregister takes the engine out of inproc.Default (Start registers
	// it there, so callers of this process reach it without a socket).
	unregister func()
	once       sync.Once
	// closed is set once Stop began: calls that fail after it mean the
	// engine is gone, not that it failed.
	closed atomic.Bool
}

// Detached is an engine that serves behind a URL another Engine's server
// listens on (an engine host's fresh engine for a slot); Stop only closes
// the engine.
func Detached(name, url string, e *engine.Engine) *Engine {
	return &Engine{Name: name, URL: url, E: e}
}

// Closed says whether Stop began.
func (le *Engine) Closed() bool { return le.closed.Load() }

// Stop shuts the engine's listener and loop down (idempotent): in-flight
// requests end with "abort", then the HTTP server closes.
func (le *Engine) Stop(ctx context.Context) error {
	var err error
	le.once.Do(func() {
		le.closed.Store(true)
		if le.unregister != nil {
			le.unregister() // from now on its URL is reached, and refused, over the network
		}
		err = le.E.Shutdown(ctx)
		if le.srv == nil {
			return
		}
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

// Wrap wraps engine i's HTTP handler (a test hook, or an engine host's
// switchable handler).
type Wrap func(i int, e *engine.Engine, h http.Handler) http.Handler

// New builds engine i of c (the seed and logger of slot i, loading later
// versions from checkpoint directories with wiring.LoadPolicy and PEFT
// LoRA adapters with wiring.LoadAdapter) serving m at version 0, without
// a listener.
//
// With engines.api_key_file every route wants the key, and
// engines.weight_roots bound the loads (engine.WithAPIKey,
// engine.WithWeightRoots). extra options come last (e.g.
// wiring.EngineTokenizer's engine.WithTokenizer for a model with a Hugging
// Face tokenizer).
func New(c config.EnginesConfig, m engine.Model, seed int64, i int, log zerolog.Logger, extra ...engine.Option) (*engine.Engine, error) {
	key, err := wiring.ReadSecret("engines.api_key_file", c.APIKeyFile)
	if err != nil {
		return nil, err
	}
	opts := append([]engine.Option{
		engine.WithLogger(log.With().Str("engine", "engine-"+strconv.Itoa(i)).Logger()), engine.WithLoader(wiring.LoadPolicy), engine.WithAdapterLoader(wiring.LoadAdapter),
		engine.WithAPIKey(key), engine.WithWeightRoots(c.WeightRoots...)}, wiring.EngineQuantize(c.Quantize)...)
	opts = append(opts, extra...)
	return engine.New(wiring.EngineConfig(c, c.ServedModelName, uint64(seed)+uint64(i)*0x9e3779b9), m, opts...)
}

// Start starts c.Count built-in engines on c.ListenHost serving m at
// version 0. Each is also registered in inproc.Default under its URL, so
// an inproc.Transport of this process serves it without a socket; Stop
// unregisters it. They load later versions from checkpoint directories with
// wiring.LoadPolicy (the receivers' path). wrap, when set, wraps each
// engine's HTTP handler.
func Start(c config.EnginesConfig, m engine.Model, seed int64, log zerolog.Logger, wrap Wrap, extra ...engine.Option) ([]*Engine, error) {
	es := make([]*engine.Engine, 0, c.Count)
	for i := range c.Count {
		e, err := New(c, m, seed, i, log, extra...)
		if err != nil {
			closeAll(es)
			return nil, fmt.Errorf("node: engine-%d: %w", i, err)
		}
		es = append(es, e)
	}
	return Serve(c.ListenHost, es, wrap)
}

// Serve serves engines built elsewhere (a benchmark's, on a hash model)
// as Start serves its own: engine i is "engine-<i>" on host:0, registered
// in inproc.Default. From here the returned Engines own them: on error
// every one of es is closed.
func Serve(host string, es []*engine.Engine, wrap Wrap) ([]*Engine, error) {
	var out []*Engine
	for i, e := range es {
		id := "engine-" + strconv.Itoa(i)
		fail := func(err error) ([]*Engine, error) {
			closeAll(es[i:])
			StopAll(out)
			return nil, fmt.Errorf("node: %s: %w", id, err)
		}
		if err := e.CheckListen(net.JoinHostPort(host, "0")); err != nil {
			return fail(err)
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return fail(fmt.Errorf("listen: %w", err))
		}
		h := e.Handler()
		if wrap != nil {
			h = wrap(i, e, h)
		}
		le := &Engine{Name: id, E: e, URL: "http://" + ln.Addr().String(), done: make(chan error, 1),
			srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}
		// Callers in this process (the node's router) reach it through
		// inproc.Transport without a socket (issue 22).
		le.unregister = inproc.Default.Register(le.URL, h)
		go func() { le.done <- le.srv.Serve(ln) }()
		out = append(out, le)
	}
	return out, nil
}

func closeAll(es []*engine.Engine) {
	for _, e := range es {
		e.Close()
	}
}

// StopAll stops every engine of es (5 s in all).
func StopAll(es []*Engine) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, e := range es {
		_ = e.Stop(ctx)
	}
}
