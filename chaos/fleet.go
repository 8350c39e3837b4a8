package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/chaos/faultproxy"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/wiring"
)

// servedModel must match the name the node's rollout actors ask for.
const servedModel = "asyncrl-policy"

// fleet is the chaos engines: built-in engines on fixed loopback ports,
// each behind a fault proxy whose URL is what the router knows. It plays
// the weight publisher for them: every WeightsPublished version is loaded
// into every live engine and then recorded on the router, in that order,
// so the router never credits an engine with weights it does not serve.
type fleet struct {
	cfg       config.EnginesConfig
	runID     string
	seed      uint64
	pauseMode string
	log       zerolog.Logger
	httpc     *http.Client

	// mu serialises weight loads, kills, restarts and the router version
	// writes they imply, so the router's versions for one engine only grow.
	mu        sync.Mutex
	routerURL string
	model     engine.Model
	version   int64
	members   []*member
	loadErrs  []string
	// drops lists engines seen serving a lower version than before (a
	// restart that lost its weights, say).
	drops []string

	// initial is version 0's model; plantForget is a test-only switch that
	// plants a bug — a restarted engine comes back with version 0's weights
	// — so a test can prove the version invariant catches it.
	initial     engine.Model
	plantForget bool
}

// member is one chaos engine and its proxy.
type member struct {
	idx      int
	addr     string // the engine's host:port, kept across restarts
	proxy    *faultproxy.Proxy
	e        *engine.Engine // nil while killed
	cancel   context.CancelFunc
	done     chan error
	restarts int
	served   int64 // highest version this engine slot has served
}

func newFleet(n int, cfg config.Config, log zerolog.Logger) (*fleet, error) {
	m, err := wiring.InitialPolicy("", uint64(cfg.Run.Seed))
	if err != nil {
		return nil, fmt.Errorf("chaos: initial policy: %w", err)
	}
	f := &fleet{cfg: cfg.Engines, runID: cfg.Run.ID, seed: uint64(cfg.Run.Seed), pauseMode: string(cfg.Trainer.PauseMode),
		log: log, model: m, initial: m, httpc: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}}
	for i := range n {
		mb := &member{idx: i}
		f.members = append(f.members, mb)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			f.close()
			return nil, fmt.Errorf("chaos: engine %d: listen: %w", i, err)
		}
		mb.addr = ln.Addr().String()
		if err := f.serve(mb, ln, m, 0); err != nil {
			_ = ln.Close()
			f.close()
			return nil, err
		}
		if mb.proxy, err = faultproxy.Listen("127.0.0.1:0", mb.addr); err != nil {
			f.close()
			return nil, fmt.Errorf("chaos: engine %d: %w", i, err)
		}
	}
	return f, nil
}

// URLs are the proxies' base URLs (the run's external engines).
func (f *fleet) URLs() []string {
	out := make([]string, len(f.members))
	for i, m := range f.members {
		out[i] = m.proxy.URL()
	}
	return out
}

// serve starts an engine on ln with model at version.
func (f *fleet) serve(mb *member, ln net.Listener, model engine.Model, version int64) error {
	ecfg := wiring.EngineConfig(f.cfg, servedModel, f.seed+uint64(mb.idx+1)*0x9e3779b9+uint64(mb.restarts))
	// Engines log every weight swap at info; like the node's, they only
	// speak up for warnings.
	quiet := f.log.Level(max(f.log.GetLevel(), zerolog.WarnLevel))
	e, err := engine.New(ecfg, model, engine.WithLogger(quiet.With().Str("engine", "chaos-"+strconv.Itoa(mb.idx)).Logger()))
	if err != nil {
		return fmt.Errorf("chaos: engine %d: %w", mb.idx, err)
	}
	if version > 0 {
		if err := e.SetModel(model, version); err != nil {
			e.Close()
			return fmt.Errorf("chaos: engine %d: version %d: %w", mb.idx, version, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	mb.e, mb.cancel, mb.done = e, cancel, make(chan error, 1)
	go func() { mb.done <- e.Serve(ctx, ln) }()
	return nil
}

// stopEngine shuts mb's engine down as if its process died (in-flight
// requests aborted, listener closed). Called with f.mu held.
func (f *fleet) stopEngine(mb *member) error {
	if mb.e == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := mb.e.Shutdown(ctx)
	mb.cancel()
	select {
	case serr := <-mb.done:
		if serr != nil && !errors.Is(serr, http.ErrServerClosed) && !errors.Is(serr, context.Canceled) {
			err = errors.Join(err, serr)
		}
	case <-ctx.Done():
		err = errors.Join(err, ctx.Err())
	}
	mb.e = nil
	return err
}

// kill shuts engine i down.
func (f *fleet) kill(i int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stopEngine(f.members[i])
}

// restart starts engine i again on its old port with the latest weights
// and records that version on the router.
func (f *fleet) restart(i int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	mb := f.members[i]
	if mb.e != nil {
		return nil
	}
	var ln net.Listener
	var err error
	// The old listener's port can take a moment to free: the killed
	// engine's shutdown closes it, and on a loaded machine (make test runs
	// packages side by side) that took over the former 1 s of retries.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if ln, err = net.Listen("tcp", mb.addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("chaos: engine %d: relisten on %s: %w", i, mb.addr, err)
	}
	mb.restarts++
	model, version := f.model, f.version
	if f.plantForget {
		model, version = f.initial, 0
	}
	if err := f.serve(mb, ln, model, version); err != nil {
		_ = ln.Close()
		return err
	}
	f.observe(mb, version)
	return f.postVersion(mb, version)
}

// setRouter tells the fleet where the router's admin API is and records
// every engine's current version there.
func (f *fleet) setRouter(u string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.routerURL = u
	var errs []error
	for _, mb := range f.members {
		errs = append(errs, f.postVersion(mb, f.version))
	}
	return errors.Join(errs...)
}

// postVersion records on the router that mb serves v. Called with f.mu held.
func (f *fleet) postVersion(mb *member, v int64) error {
	if f.routerURL == "" {
		return nil
	}
	return adminCall(f.httpc, http.MethodPost, f.routerURL+"/admin/replicas/version?url="+url.QueryEscape(mb.proxy.URL())+"&version="+strconv.FormatInt(v, 10))
}

// onWeights loads a published version into every live engine (pause,
// swap, resume), then records it on the router.
func (f *fleet) onWeights(msg *transport.Msg) {
	wp, err := messages.DecodeAs[messages.WeightsPublished](msg.Data)
	if err != nil || wp.RunID != f.runID || wp.Format != messages.WeightsFull {
		// Only the trainer's full serving checkpoints: the node re-announces
		// each version as a delta for its own engines on the same subject.
		return
	}
	dir, ok := strings.CutPrefix(wp.URI, "file://")
	if !ok {
		f.fail(fmt.Sprintf("version %d: URI %q is not file://", wp.Version, wp.URI))
		return
	}
	m, err := wiring.LoadPolicy(dir)
	if err != nil {
		f.fail(fmt.Sprintf("version %d: %v", wp.Version, err))
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if wp.Version <= f.version {
		return // a redelivery or an old version: never go back
	}
	f.model, f.version = m, wp.Version
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, mb := range f.members {
		if mb.e == nil {
			continue // killed: restart installs the latest version
		}
		if err := mb.e.Pause(ctx, f.pauseMode, false); err != nil {
			f.loadErrs = append(f.loadErrs, fmt.Sprintf("engine %d pause for v%d: %v", mb.idx, wp.Version, err))
			continue
		}
		err := mb.e.SetModel(m, wp.Version)
		mb.e.Resume()
		if err != nil {
			f.loadErrs = append(f.loadErrs, fmt.Sprintf("engine %d v%d: %v", mb.idx, wp.Version, err))
			continue
		}
		f.observe(mb, wp.Version)
		if err := f.postVersion(mb, wp.Version); err != nil {
			f.log.Warn().Err(err).Int("engine", mb.idx).Int64("version", wp.Version).Msg("chaos: router version not recorded")
		}
	}
}

// observe records that mb now serves v; a lower version than it served
// before is a violation. Called with f.mu held.
func (f *fleet) observe(mb *member, v int64) {
	if v < mb.served {
		f.drops = append(f.drops, fmt.Sprintf("engine %d: served v%d, now v%d (restart %d)", mb.idx, mb.served, v, mb.restarts))
	}
	mb.served = max(mb.served, v)
}

func (f *fleet) fail(s string) {
	f.mu.Lock()
	f.loadErrs = append(f.loadErrs, s)
	f.mu.Unlock()
}

// engineVersions returns every engine's serving version; -1 while killed.
func (f *fleet) engineVersions() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]int64, len(f.members))
	for i, mb := range f.members {
		out[i] = -1
		if mb.e != nil {
			out[i] = mb.e.Version()
		}
	}
	return out
}

func (f *fleet) latest() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.version
}

// close stops every proxy and engine.
func (f *fleet) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, mb := range f.members {
		if mb.proxy != nil {
			_ = mb.proxy.Close()
		}
		_ = f.stopEngine(mb)
	}
	f.httpc.CloseIdleConnections()
}

// adminCall performs one router admin request and wants a 2xx answer.
func adminCall(c *http.Client, method, u string) error {
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("chaos: router admin: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("chaos: router admin %s %s: %s", method, u, resp.Status)
	}
	return nil
}
