// Package enginehost is the engine role of asyncrl node: built-in engines
// that serve whichever node holds the trainer lease, brought to each term's
// versions by weight-sync agents (cluster/weightsync) on the holder's
// LoadWeights.
package enginehost

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/cluster/internal/retry"
	"github.com/asyncrl/asyncrl/cluster/localengine"
	"github.com/asyncrl/asyncrl/cluster/weightsync"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
	"github.com/asyncrl/asyncrl/weights/receiver"
	"github.com/asyncrl/asyncrl/weights/store"
	"github.com/asyncrl/asyncrl/wiring"
)

// Host is the engine role of asyncrl node: engines.count built-in
// engines that serve whichever node holds the trainer lease. They are
// advertised in the node's gossip metadata (Endpoints "engine-<i>"); the
// holder's pipeline registers them with its publisher and router (see
// cluster/node's remote.go) and sends each a LoadWeights on the node's control subject.
// A LoadWeights of a new term (its RunID, <run>-t<token>) makes the host
// download that term's base checkpoint from the term's object store and
// give every engine a fresh receiver over the store; from then on the
// engine agents of weightsync.go bring the engines to each target and ack
// it on the term's subjects, and the host announces every engine's health
// and load there once a second. Until an engine has loaded a version of
// the current term it announces itself unhealthy, so the router sends it
// nothing (discovery also wants an ack ≥ the minimum version).
type Host struct {
	node    string
	baseRun string
	cfg     config.Config
	bus     *natsbus.Bus
	log     zerolog.Logger
	event   func(format string, args ...any)
	root    string // <data_dir>/<node>/engines
	tick    time.Duration
	engines []*localengine.Engine // the slots: name, URL and HTTP server of each engine
	initial engine.Model          // the seed's weights, a fresh engine's version 0
	quiet   zerolog.Logger        // the engines' logger
	apiKey  string                // engines.api_key_file's key, sent by the drivers
	sub     transport.Subscription
	loads   chan messages.LoadWeights

	mu sync.Mutex
	// current is the engine each slot serves with in the current term
	// (the slot's own until the first switch), handlers its HTTP handler:
	// a term's versions start at 0 again while an engine's never
	// decrease, so each new term gets fresh engines behind the same URLs.
	current  []*localengine.Engine
	handlers map[int]http.Handler
	term     string // the term the engines follow ("" before the first LoadWeights)
	// beforeApply, when set, runs before an engine applies a version (a
	// test hook: a slow catch-up, to check nothing routes to it meanwhile).
	beforeApply func(engine int, version int64)
	token       uint64
	agents      map[string]*weightsync.Agent
	// loaded: engines that serve a version of the current term.
	loaded map[string]int64
	served map[string]bool // engines that answered a generation request

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// engineEndpointKey is the gossip metadata key of engine i's URL.
func EndpointKey(i int) string { return "engine-" + strconv.Itoa(i) }

// hostedEngineName is the cluster-wide name of a node's engine (its
// endpoint key prefixed with the node), used on the bus and by the
// publisher.
func EngineName(node, key string) string { return node + "-" + key }

// ErrConfig wraps problems with the host's configuration.
var ErrConfig = errors.New("invalid engine host configuration")

// ObjectScheme prefixes a JetStream object store bucket in a LoadWeights
// URI.
const ObjectScheme = "nats-os://"

// BasePrefix is where a term's base checkpoint (its version 0) lies in
// the term's weight bucket, next to the deltas.
const BasePrefix = "base/"

// Start starts the node's engines on cfg.Engines.ListenHost
// (loopback by default) serving the run seed's initial weights, and
// subscribes to the node's control subject. Call endpoints() for the
// gossip metadata, then run() once the node has joined.
func Start(cfg config.Config, node string, bus *natsbus.Bus, log zerolog.Logger, event func(string, ...any)) (*Host, error) {
	if cfg.Engines.Count < 1 {
		return nil, fmt.Errorf("%w: the engine role needs engines.count ≥ 1", ErrConfig)
	}
	// LoadWeights arrive on the node's control subject under the run's
	// base id (transport.RunPlan.EngineControl): a host does not know the
	// current term before the first command arrives.
	base, err := transport.Plan(cfg.Run.ID)
	if err != nil {
		return nil, fmt.Errorf("%w: run.id: %w", ErrConfig, err)
	}
	subj, err := base.EngineControl(node)
	if err != nil {
		return nil, fmt.Errorf("%w: --name: %w", ErrConfig, err)
	}
	h := &Host{node: node, baseRun: cfg.Run.ID, cfg: cfg, bus: bus, log: log.With().Str("component", "engine-host").Logger(),
		event: event, root: filepath.Join(cfg.Run.DataDir, node, "engines"), tick: time.Second,
		loads: make(chan messages.LoadWeights, 256), agents: map[string]*weightsync.Agent{}, loaded: map[string]int64{}, served: map[string]bool{},
		handlers: map[int]http.Handler{}}
	if h.apiKey, err = wiring.ReadSecret("engines.api_key_file", cfg.Engines.APIKeyFile); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	if err := os.RemoveAll(h.root); err != nil {
		return nil, fmt.Errorf("node: engine host dir: %w", err)
	}
	initial, err := wiring.InitialPolicy("", uint64(cfg.Run.Seed))
	if err != nil {
		return nil, err
	}
	h.initial, h.quiet = initial, log.Level(max(log.GetLevel(), zerolog.WarnLevel))
	if h.engines, err = localengine.Start(cfg.Engines, initial, cfg.Run.Seed, h.quiet, h.wrap); err != nil {
		return nil, err
	}
	for i, le := range h.engines {
		le.Name = EngineName(node, EndpointKey(i))
	}
	h.current = append([]*localengine.Engine(nil), h.engines...)
	if h.sub, err = bus.Subscribe(subj, h.onLoad); err != nil {
		h.Stop()
		return nil, fmt.Errorf("node: engine host: %w", err)
	}
	h.wg.Go(h.loop)
	h.wg.Go(h.announce)
	return h, nil
}

// Endpoints are the engines' URLs for the gossip metadata.
func (h *Host) Endpoints() map[string]string {
	out := map[string]string{}
	for i, le := range h.engines {
		out[EndpointKey(i)] = le.URL
	}
	return out
}

// Current is the engine each slot serves with in the current term.
func (h *Host) Current() []*localengine.Engine {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*localengine.Engine(nil), h.current...)
}

// Tick is how often the engines' health and load are announced.
func (h *Host) Tick() time.Duration { return h.tick }

// SetBeforeApply sets a hook that runs before an engine of a later term
// applies a version (a test's slow catch-up).
func (h *Host) SetBeforeApply(f func(engine int, version int64)) {
	h.mu.Lock()
	h.beforeApply = f
	h.mu.Unlock()
}

// wrap serves slot i's URL with the slot's current engine, and records
// an engine's first generation request (an event, so an operator or a
// test sees that traffic came only after the catch-up).
func (h *Host) wrap(i int, _ *engine.Engine, next http.Handler) http.Handler {
	h.mu.Lock()
	h.handlers[i] = next
	h.mu.Unlock()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		cur := h.handlers[i]
		h.mu.Unlock()
		if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/v1/") && strings.HasSuffix(r.URL.Path, "completions") {
			name := EngineName(h.node, EndpointKey(i))
			h.mu.Lock()
			first := !h.served[name]
			h.served[name] = true
			v, caughtUp := h.loaded[name]
			h.mu.Unlock()
			switch {
			case first && caughtUp:
				h.event("engine %s first request at version %d", name, v)
			case first:
				h.event("engine %s got a request before catching up", name)
			}
		}
		cur.ServeHTTP(w, r)
	})
}

// freshEngine is a new engine for slot i serving the seed's weights at
// version 0, configured as startEngines configures the slot's first one.
func (h *Host) freshEngine(i int) (*localengine.Engine, error) {
	le := h.engines[i]
	e, err := localengine.New(h.cfg.Engines, h.initial, h.cfg.Run.Seed, i, h.quiet)
	if err != nil {
		return nil, fmt.Errorf("node: %s: %w", le.Name, err)
	}
	return localengine.Detached(le.Name, le.URL, e), nil
}

func (h *Host) onLoad(m *transport.Msg) {
	lw, err := messages.DecodeAs[messages.LoadWeights](m.Data)
	if err != nil {
		h.log.Warn().Err(err).Msg("engine host: undecodable LoadWeights")
		return
	}
	select {
	case h.loads <- lw:
	default:
		// Full: drop it; the publisher dispatches again with the next
		// version, and targets coalesce anyway.
		h.log.Warn().Str("engine", lw.Engine).Int64("version", lw.Version).Msg("engine host: command queue full, dropped")
	}
}

// termToken is the token of a term run id <run>-t<token> (0 if malformed).
func TermToken(baseRun, term string) uint64 {
	rest, ok := strings.CutPrefix(term, baseRun+"-t")
	if !ok {
		return 0
	}
	t, err := strconv.ParseUint(rest, 10, 64)
	if err != nil {
		return 0
	}
	return t
}

// loop handles LoadWeights one at a time: a newer term switches every
// engine over; an older term's command (a deposed holder) is ignored.
func (h *Host) loop() {
	// failedTerm is the last term the engines could not follow: its
	// commands come again every resend, and each retries the switch, but
	// the failure is an event once per term, not every 2 s per engine.
	failedTerm := ""
	for {
		select {
		case <-h.ctx.Done():
			return
		case lw := <-h.loads:
			tok := TermToken(h.baseRun, lw.RunID)
			h.mu.Lock()
			cur, term := h.token, h.term
			h.mu.Unlock()
			if tok == 0 || tok < cur {
				continue
			}
			if lw.RunID != term {
				if err := h.switchTerm(lw, tok); err != nil {
					if h.ctx.Err() == nil && failedTerm != lw.RunID {
						h.event("engines could not follow term %s: %v (trying again on its next command)", lw.RunID, err)
						failedTerm = lw.RunID
					}
					continue
				}
			}
			h.mu.Lock()
			a := h.agents[lw.Engine]
			h.mu.Unlock()
			if a != nil {
				a.Dispatch(lw.Version)
				h.reack(a, lw.Version)
			}
		}
	}
}

// reack acks again the version engine a serves when a LoadWeights asks
// for one it has already loaded (the agent does nothing for it): the
// holder resends a command until it hears an ack, so its ack was lost,
// or the holder registered the engine afresh (its node left gossip
// and came back, which makes the holder's discovery forget the engine's
// version). Without a new ack the engine would stay out of routing until
// the next version, and with no other engine there is none.
//
// Only the loop dispatches to a host's agents, so an agent that is idle
// here stays so until the ack is out.
func (h *Host) reack(a *weightsync.Agent, version int64) {
	ctx, cancel := context.WithTimeout(h.ctx, 2*time.Second)
	defer cancel()
	if sent, err := a.Reack(ctx, version); sent && err != nil && h.ctx.Err() == nil {
		h.log.Debug().Err(err).Str("engine", a.Name()).Int64("version", version).Msg("engine host: ack not repeated")
	}
}

// switchTerm downloads the term's base checkpoint and gives every engine
// a fresh receiver and agent for the term.
func (h *Host) switchTerm(lw messages.LoadWeights, tok uint64) error {
	bucket, ok := strings.CutPrefix(lw.URI, ObjectScheme)
	if !ok || bucket == "" {
		return fmt.Errorf("LoadWeights URI %q is not %s<bucket>", lw.URI, ObjectScheme)
	}
	ctx, cancel := context.WithTimeout(h.ctx, time.Minute)
	defer cancel()
	var st *store.NATS
	if err := retry.Do(ctx, time.Minute, func() (err error) {
		st, err = store.OpenNATS(ctx, h.bus.Conn(), bucket)
		return err
	}); err != nil {
		return err
	}
	dir := filepath.Join(h.root, lw.RunID)
	base := filepath.Join(dir, "base")
	// The receivers ride out a leader election of the bucket (a node
	// whose server led it died) instead of failing the version.
	rst, err := store.NewRetrying(st, store.RetryConfig{Attempts: 8, BaseDelay: 200 * time.Millisecond, MaxDelay: 5 * time.Second}, nil)
	if err != nil {
		return err
	}
	if err := retry.Do(ctx, time.Minute, func() error { return DownloadPrefix(ctx, st, BasePrefix, base) }); err != nil {
		return fmt.Errorf("base checkpoint: %w", err)
	}
	h.mu.Lock()
	followed := h.term != "" // the engines served a term already
	cur := append([]*localengine.Engine(nil), h.current...)
	hook := h.beforeApply
	h.mu.Unlock()
	agents := map[string]*weightsync.Agent{}
	var fresh []*localengine.Engine
	fail := func(err error) error {
		for _, a := range agents {
			a.Stop()
		}
		for _, le := range fresh {
			le.E.Close()
		}
		return err
	}
	for i, le := range h.engines {
		// An engine that served a term holds that term's versions and
		// would refuse this term's version 0 (versions never decrease):
		// the slot gets a fresh engine.
		if followed {
			ne, err := h.freshEngine(i)
			if err != nil {
				return fail(err)
			}
			fresh = append(fresh, ne)
			cur[i], le = ne, ne
		}
		rc := receiver.DefaultConfig(filepath.Join(dir, le.Name), base)
		rc.Logger = h.log.With().Str("engine", le.Name).Logger()
		rcv, err := receiver.New(rc, rst)
		if err != nil {
			return fail(fmt.Errorf("receiver %s: %w", le.Name, err))
		}
		de, err := weightsync.DriveLocal(le, h.cfg.Engines.ServedModelName, h.apiKey)
		if err != nil {
			return fail(err)
		}
		// The callback names its term: an agent of the previous term that
		// finishes a version while the host switches must not mark the
		// slot's fresh engine loaded (announced healthy) in this one.
		term := lw.RunID
		// The engine holds no version of this term yet, not its version
		// 0: target 0 (the term's base) must be loaded too (Fresh).
		a := weightsync.StartAgent(weightsync.AgentConfig{Index: i, Engine: de, Source: weightsync.ReceiverSource(rcv),
			Reporter: hostReporter{h}, Bus: h.bus, RunID: lw.RunID, Sender: h.node, PauseMode: string(h.cfg.Trainer.PauseMode),
			Logger: h.log, BeforeApply: hook, Fresh: true,
			OnLoaded: func(name string, version int64) { h.loadedVersion(term, name, version) }})
		agents[le.Name] = a
	}
	h.mu.Lock()
	old, oldTerm, oldCur := h.agents, h.term, h.current
	h.agents, h.term, h.token = agents, lw.RunID, tok
	h.loaded = map[string]int64{}
	h.served = map[string]bool{} // each term's first request is checked against its catch-up
	h.current = cur
	for i, le := range cur {
		if le != oldCur[i] {
			h.handlers[i] = le.E.Handler()
		}
	}
	h.mu.Unlock()
	for _, a := range old {
		a.Stop()
	}
	if followed {
		// The old term's engines: their requests (a deposed holder's)
		// end with "abort". A slot's first engine stops with its server.
		for i, le := range oldCur {
			if le != h.engines[i] {
				le.E.Close()
			}
		}
	}
	if oldTerm != "" {
		_ = os.RemoveAll(filepath.Join(h.root, oldTerm))
	}
	h.event("engines follow term %s", lw.RunID)
	return nil
}

// loadedVersion is the callback of term's agent after it loaded and
// acked version; a callback of a term the host no longer follows is
// ignored.
func (h *Host) loadedVersion(term, name string, version int64) {
	h.mu.Lock()
	if term != h.term {
		h.mu.Unlock()
		return
	}
	_, before := h.loaded[name]
	h.loaded[name] = version
	h.mu.Unlock()
	if !before {
		h.event("engine %s caught up to version %d of term %s", name, version, term)
	}
}

// announce publishes every engine's health and load on the current
// term's subjects once per tick (discovery marks an engine unhealthy
// when its announcements stop for StaleAfter).
func (h *Host) announce() {
	t := time.NewTicker(h.tick)
	defer t.Stop()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-t.C:
		}
		h.mu.Lock()
		term := h.term
		loaded := make(map[string]bool, len(h.loaded))
		for k := range h.loaded {
			loaded[k] = true
		}
		cur := append([]*localengine.Engine(nil), h.current...)
		h.mu.Unlock()
		if term == "" {
			continue
		}
		for _, le := range cur {
			h.publishStatus(term, le, loaded[le.Name])
		}
	}
}

func (h *Host) publishStatus(term string, le *localengine.Engine, loaded bool) {
	st := le.E.Stats()
	hdr := messages.Header{RunID: term, Sender: h.node, Version: st.Version}
	health := messages.EngineHealth{Header: hdr, Engine: le.Name, URL: le.URL, Healthy: loaded && !st.Sleeping,
		Paused: st.Paused, Updating: st.Updating}
	if !loaded {
		health.Reason = "catching up to the current version"
	}
	load := messages.EngineLoad{Header: hdr, Engine: le.Name, URL: le.URL, Running: int32(st.Running),
		Waiting: int32(st.Waiting + st.Held), KVUsage: st.KVUsage}
	plan, err := transport.Plan(term)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(h.ctx, 2*time.Second)
	defer cancel()
	for _, p := range []struct {
		kind transport.EngineTopic
		msg  messages.Message
	}{{transport.EngineHealth, health}, {transport.EngineLoad, load}} {
		subj, err := plan.Engine(le.Name, p.kind)
		if err != nil {
			continue
		}
		data, err := messages.Encode(p.msg)
		if err == nil {
			err = h.bus.Publish(ctx, subj, data)
		}
		if err != nil && h.ctx.Err() == nil {
			h.log.Debug().Err(err).Str("subject", subj).Msg("engine host: announcement not sent")
		}
	}
}

// Stop stops the agents, the engines and the subscription. Idempotent.
func (h *Host) Stop() {
	if h.sub != nil {
		_ = h.sub.Unsubscribe()
	}
	h.cancel()
	h.wg.Wait()
	h.mu.Lock()
	agents, cur := h.agents, h.current
	h.agents, h.current = map[string]*weightsync.Agent{}, nil
	h.mu.Unlock()
	for _, a := range agents {
		a.Stop()
	}
	for i, le := range cur {
		if le != h.engines[i] {
			le.E.Close()
		}
	}
	localengine.StopAll(h.engines)
}

// hostReporter is the engine host's weightsync.Reporter: there is no publisher
// shell on this node, so progress is only logged (the holder's publisher
// learns from the acks on the bus).
type hostReporter struct{ h *Host }

func (hostReporter) Fetching(string, int64) error { return nil }
func (r hostReporter) Failed(name string, version int64, err error) {
	r.h.log.Warn().Err(err).Str("engine", name).Int64("version", version).Msg("engine host: version not loaded")
}
func (r hostReporter) Leave(name string) { r.h.event("engine %s stopped", name) }

// downloadPrefix copies every object under prefix into dir (keys relative
// to prefix), replacing dir.
func DownloadPrefix(ctx context.Context, st store.Store, prefix, dir string) error {
	keys, err := st.List(ctx, prefix)
	if err != nil {
		return err
	}
	if len(keys) == 0 {
		return fmt.Errorf("%w: nothing under %s", store.ErrNotFound, prefix)
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	files := make([]store.FileObject, len(keys))
	for i, k := range keys {
		files[i] = store.FileObject{Key: k, Path: filepath.Join(dir, filepath.FromSlash(strings.TrimPrefix(k, prefix)))}
	}
	return store.GetFiles(ctx, st, files, 0)
}
