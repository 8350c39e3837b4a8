package node

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors/publisher"
	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/actors/router/proxy"
	"github.com/asyncrl/asyncrl/cluster/localengine"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/wiring"
)

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
//
// As the Publisher contract says, a version some engine made live is
// published (nil; the other engines' errors are logged), and one no engine
// took is an error. A try again of the same version (the trainer's
// retry) commands only the engines that do not serve it yet: a healthy
// engine is not paused a second time (pause mode abort would cut its
// requests again).
type inProcPublisher struct {
	mode    string
	router  *proxy.Router
	log     zerolog.Logger
	mu      sync.Mutex
	engines []*localengine.Engine
}

var _ publisher.Publisher = (*inProcPublisher)(nil)

func (p *inProcPublisher) Publish(ctx context.Context, w publisher.Weights, version int64) error {
	var m engine.Model = w.Model
	if w.Model == nil {
		// A serving directory (an exec child's): loaded once, the one
		// immutable model shared by every engine of the process.
		lm, err := wiring.LoadPolicy(w.Dir)
		if err != nil {
			return fmt.Errorf("node: version %d: %w", version, err)
		}
		m = lm
	}
	p.mu.Lock()
	es := append([]*localengine.Engine(nil), p.engines...)
	p.mu.Unlock()
	var errs []error
	live := 0
	for _, le := range es {
		if le.E.Version() == version {
			live++ // made live by an earlier try of this version
			continue
		}
		if err := p.update(ctx, le, m, version); err != nil {
			if errors.Is(err, engine.ErrClosed) {
				continue // a stopped engine (killed in a chaos test) keeps its old version, out of rotation
			}
			errs = append(errs, fmt.Errorf("%s: %w", le.URL, err))
			continue
		}
		live++
	}
	if live == 0 {
		return errors.Join(errs...)
	}
	for _, err := range errs {
		p.log.Warn().Err(err).Int64("version", version).Msg("publisher: an engine did not take the version; the others serve it")
	}
	return p.router.Apply(policy.SetMinVersion{Version: version})
}

func (p *inProcPublisher) update(ctx context.Context, le *localengine.Engine, m engine.Model, version int64) error {
	if err := le.E.Pause(ctx, p.mode, false); err != nil {
		// A "wait" pause cut short (ctx ended) leaves the engine paused:
		// let it serve its current weights rather than nothing.
		le.E.Resume()
		return err
	}
	err := le.E.SetModel(m, version)
	le.E.Resume()
	if err != nil {
		return err
	}
	return p.router.Apply(policy.SetVersion{URL: le.URL, Version: version})
}
