package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/actors/router/proxy"
	"github.com/asyncrl/asyncrl/actors/trainer"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/engine/latency"
	pol "github.com/asyncrl/asyncrl/policy"
)

// servedModel is the model name the built-in engines serve.
const servedModel = "asyncrl-policy"

// localEngine is one built-in engine serving on loopback.
type localEngine struct {
	e      *engine.Engine
	url    string
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// stop shuts the engine's listener and loop down (idempotent).
func (le *localEngine) stop(ctx context.Context) error {
	var err error
	le.once.Do(func() {
		err = le.e.Shutdown(ctx)
		le.cancel()
		select {
		case serr := <-le.done:
			err = errors.Join(err, serr)
		case <-ctx.Done():
			err = errors.Join(err, ctx.Err())
		}
	})
	return err
}

// engineConfig maps the run config's engines section onto engine.Config.
func engineConfig(c config.EnginesConfig, seed uint64) engine.Config {
	ec := engine.DefaultConfig()
	ec.ServedModelName = servedModel
	ec.MaxModelLen = c.MaxModelLen
	ec.Seed = seed
	ec.TimeScale = c.TimeScale
	ec.Latency = latency.Config{
		MaxNumSeqs: c.MaxNumSeqs, MaxWaiting: c.MaxWaiting, BlockSize: c.BlockSize, CacheBlocks: c.PrefixCacheBlocks,
		PrefillPerToken: time.Duration(c.PrefillUSPerToken * float64(time.Microsecond)),
		DecodeBase:      time.Duration(c.DecodeUSPerToken * float64(time.Microsecond)),
		DecodePerSeq:    time.Duration(c.DecodeBatchSlope * float64(time.Microsecond)),
	}
	return ec
}

// startEngines starts count built-in engines serving m at version 0.
func startEngines(c config.EnginesConfig, m *pol.Model, seed int64, log zerolog.Logger) ([]*localEngine, error) {
	var out []*localEngine
	for i := range c.Count {
		id := "engine-" + strconv.Itoa(i)
		e, err := engine.New(engineConfig(c, uint64(seed)+uint64(i)*0x9e3779b9), m, engine.WithLogger(log.With().Str("engine", id).Logger()))
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
		ctx, cancel := context.WithCancel(context.Background())
		le := &localEngine{e: e, url: "http://" + ln.Addr().String(), cancel: cancel, done: make(chan error, 1)}
		go func() { le.done <- e.Serve(ctx, ln) }()
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

// routerConfig maps the run config's router section onto proxy.Config.
func routerConfig(c config.RouterConfig, replicas []string, log zerolog.Logger) proxy.Config {
	pc := proxy.DefaultConfig()
	pc.Policy.Policy = string(c.Policy)
	pc.Policy.LoadFactor = c.BalanceFactor
	pc.Policy.SessionTTL = c.SessionTTL
	pc.Policy.SweepInterval = c.SweepInterval
	pc.Policy.VirtualNodes = c.VirtualNodes
	pc.Policy.LagRule = string(c.BehindVersionRule)
	pc.Policy.FailThreshold = c.UnhealthyThreshold
	pc.Policy.RecoverThreshold = c.HealthyThreshold
	pc.Replicas = replicas
	pc.ListenAddr = "127.0.0.1:0"
	pc.MaxBodyBytes = c.MaxBodyBytes
	pc.HealthInterval = c.HealthCheckInterval
	pc.HealthTimeout = c.HealthCheckTimeout
	pc.MaxRetries = c.MaxRetries
	pc.RetryRatio = c.RetryBudget
	pc.Logger = log
	return pc
}

// inProcPublisher makes a version live on the in-process engines: each
// engine is paused (keep, abort or wait), gets the new BF16 serving copy and
// resumes; then the router learns every engine's version and the new
// minimum. It stands in for the weight publisher until that lands.
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
		p.router.Do(func(_ time.Time, c *policy.Core) { c.SetMinVersion(version) })
	}
	return errors.Join(errs...)
}

func (p *inProcPublisher) update(ctx context.Context, le *localEngine, m *pol.Model, version int64) error {
	if err := le.e.Pause(ctx, p.mode, false); err != nil {
		return err
	}
	err := le.e.SetModel(m, version)
	le.e.Resume()
	if err != nil {
		return err
	}
	p.router.Do(func(_ time.Time, c *policy.Core) { _ = c.SetVersion(le.url, version) })
	return nil
}
