package discovery

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
)

// WatcherConfig configures a Watcher.
type WatcherConfig struct {
	// Run is the run id whose engine subjects are watched.
	Run string
	// Core configures the decision logic.
	Core Config
	// TickInterval is how often staleness is re-evaluated (default
	// Core.StaleAfter/4, so an engine goes unhealthy at most a quarter of
	// StaleAfter late).
	TickInterval time.Duration
	// Logger receives the watcher's logs (default zerolog.Nop()).
	Logger zerolog.Logger
	// OnChange, when set, is called with every change applied to the
	// router except metrics samples, in order, under the watcher's lock
	// (keep it short; the node agent prints them as events).
	OnChange func(Change)
}

// DefaultWatcherConfig returns defaults for run.
func DefaultWatcherConfig(run string) WatcherConfig {
	c := DefaultConfig()
	return WatcherConfig{Run: run, Core: c, TickInterval: c.StaleAfter / 4, Logger: zerolog.Nop()}
}

// Watcher is the discovery shell: it feeds the core from the bus and from
// membership callbacks and applies the changes to a router.
type Watcher struct {
	cfg    WatcherConfig
	router Router
	log    zerolog.Logger
	now    func() time.Time

	mu   sync.Mutex
	core *Core
	subs []transport.Subscription
}

// NewWatcher subscribes to the run's engine announcements and weight
// versions on bus. Call Run for the staleness ticks and Close to stop.
func NewWatcher(bus transport.Bus, r Router, cfg WatcherConfig) (*Watcher, error) {
	core, err := New(cfg.Core)
	if err != nil {
		return nil, err
	}
	if cfg.TickInterval <= 0 {
		// At least 1ns: a StaleAfter under 4ns would otherwise default to a
		// zero interval, on which Run's ticker panics.
		cfg.TickInterval = max(cfg.Core.StaleAfter/4, 1)
	}
	plan, err := transport.Plan(cfg.Run)
	if err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	weights, engines := plan.Weights, plan.EnginesAll
	w := &Watcher{cfg: cfg, router: r, log: cfg.Logger, now: time.Now, core: core}
	for _, s := range []string{engines, weights} {
		sub, err := bus.Subscribe(s, w.onMsg)
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("discovery: subscribe %s: %w", s, err)
		}
		w.subs = append(w.subs, sub)
	}
	return w, nil
}

func (w *Watcher) onMsg(m *transport.Msg) {
	msg, err := messages.Decode(m.Data)
	if err != nil {
		w.log.Debug().Err(err).Str("subject", m.Subject).Msg("discovery: undecodable message ignored")
		return
	}
	if h := msg.Head(); h.RunID != "" && h.RunID != w.cfg.Run {
		return
	}
	w.step(func(now time.Time, c *Core) []Change {
		switch v := msg.(type) {
		case messages.EngineHealth:
			return c.Health(now, v.Sender, v)
		case messages.EngineLoad:
			return c.Load(now, v.Sender, v)
		case messages.EngineVersionAck:
			return c.Ack(now, v.Sender, v)
		case messages.MinVersionSet:
			return c.SetMinVersion(now, v.MinVersion)
		}
		return nil
	})
}

// step runs f on the core and applies its changes, under the watcher's
// lock so changes reach the router in the order the core made them.
func (w *Watcher) step(f func(now time.Time, c *Core) []Change) {
	w.mu.Lock()
	defer w.mu.Unlock()
	changes := f(w.now(), w.core)
	if len(changes) == 0 {
		return
	}
	if err := Apply(w.router, changes); err != nil {
		w.log.Warn().Err(err).Msg("discovery: applying changes to the router")
	}
	for _, ch := range changes {
		if ch.Op != OpMetrics {
			w.log.Debug().Str("change", ch.String()).Msg("discovery")
			if w.cfg.OnChange != nil {
				w.cfg.OnChange(ch)
			}
		}
	}
}

// MemberJoined feeds a membership join; endpoints is the member's
// NodeMeta.Endpoints (its engine URLs are the values of keys "engine" and
// "engine-…").
func (w *Watcher) MemberJoined(node string, endpoints map[string]string) {
	urls := EngineURLs(endpoints)
	w.step(func(now time.Time, c *Core) []Change { return c.MemberJoined(now, node, urls) })
}

// MemberLeft feeds a membership leave or death.
func (w *Watcher) MemberLeft(node string) {
	w.step(func(now time.Time, c *Core) []Change { return c.MemberLeft(now, node) })
}

// Routable lists the engines the router should send new traffic to.
func (w *Watcher) Routable() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.core.Routable()
}

// Run re-evaluates staleness every TickInterval until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	t := time.NewTicker(w.cfg.TickInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.step(func(now time.Time, c *Core) []Change { return c.Tick(now) })
		}
	}
}

// Close unsubscribes.
func (w *Watcher) Close() error {
	var errs []error
	for _, s := range w.subs {
		errs = append(errs, s.Unsubscribe())
	}
	w.subs = nil
	return errors.Join(errs...)
}

// EngineURLs extracts engine URLs from a member's endpoints: the values of
// the keys "engine" and "engine-<anything>", sorted.
func EngineURLs(endpoints map[string]string) []string {
	var out []string
	for k, v := range endpoints {
		if v != "" && (k == "engine" || strings.HasPrefix(k, "engine-")) {
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return out
}
