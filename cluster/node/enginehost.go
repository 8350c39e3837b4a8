package node

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors/publisher"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/internal/wiring"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
	"github.com/asyncrl/asyncrl/weights/receiver"
	"github.com/asyncrl/asyncrl/weights/store"
)

// engineHost is the engine role of asyncrl node: engines.count built-in
// engines that serve whichever node holds the trainer lease. They are
// advertised in the node's gossip metadata (Endpoints "engine-<i>"); the
// holder's pipeline registers them with its publisher and router (see
// remote.go) and sends each a LoadWeights on the node's control subject.
// A LoadWeights of a new term (its RunID, <run>-t<token>) makes the host
// download that term's base checkpoint from the term's object store and
// give every engine a fresh receiver over the store; from then on the
// engine agents of weightsync.go bring the engines to each target and ack
// it on the term's subjects, and the host announces every engine's health
// and load there once a second. Until an engine has loaded a version of
// the current term it announces itself unhealthy, so the router sends it
// nothing (discovery also wants an ack ≥ the minimum version).
type engineHost struct {
	node    string
	baseRun string
	cfg     config.Config
	bus     *natsbus.Bus
	log     zerolog.Logger
	event   func(format string, args ...any)
	root    string // <data_dir>/<node>/engines
	tick    time.Duration
	engines []*localEngine // the slots: name, URL and HTTP server of each engine
	initial engine.Model   // the seed's weights, a fresh engine's version 0
	quiet   zerolog.Logger // the engines' logger
	sub     transport.Subscription
	loads   chan messages.LoadWeights

	mu sync.Mutex
	// current is the engine each slot serves with in the current term
	// (the slot's own until the first switch), handlers its HTTP handler:
	// a term's versions start at 0 again while an engine's never
	// decrease, so each new term gets fresh engines behind the same URLs.
	current  []*localEngine
	handlers map[int]http.Handler
	term     string // the term the engines follow ("" before the first LoadWeights)
	// beforeApply, when set, runs before an engine applies a version (a
	// test hook: a slow catch-up, to check nothing routes to it meanwhile).
	beforeApply func(engine int, version int64)
	token       uint64
	agents      map[string]*engineAgent
	// loaded: engines that serve a version of the current term.
	loaded map[string]int64
	served map[string]bool // engines that answered a generation request

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// engineControlSubject is where the trainer's pipeline sends a node's
// engines their LoadWeights: asyncrl.<run>.control.engines.<node>, under
// the run's base id, because a host does not know the current term before
// the first command arrives.
func engineControlSubject(run, node string) (string, error) {
	return transport.Subject(run, transport.TopicControl, "engines", node)
}

// engineEndpointKey is the gossip metadata key of engine i's URL.
func engineEndpointKey(i int) string { return "engine-" + strconv.Itoa(i) }

// hostedEngineName is the cluster-wide name of a node's engine (its
// endpoint key prefixed with the node), used on the bus and by the
// publisher.
func hostedEngineName(node, key string) string { return node + "-" + key }

// startEngineHost starts the node's engines on cfg.Engines.ListenHost
// (loopback by default) serving the run seed's initial weights, and
// subscribes to the node's control subject. Call endpoints() for the
// gossip metadata, then run() once the node has joined.
func startEngineHost(cfg config.Config, node string, bus *natsbus.Bus, log zerolog.Logger, event func(string, ...any)) (*engineHost, error) {
	if cfg.Engines.Count < 1 {
		return nil, fmt.Errorf("%w: the engine role needs engines.count ≥ 1", ErrAgentConfig)
	}
	subj, err := engineControlSubject(cfg.Run.ID, node)
	if err != nil {
		return nil, fmt.Errorf("%w: --name: %w", ErrAgentConfig, err)
	}
	h := &engineHost{node: node, baseRun: cfg.Run.ID, cfg: cfg, bus: bus, log: log.With().Str("component", "engine-host").Logger(),
		event: event, root: filepath.Join(cfg.Run.DataDir, node, "engines"), tick: time.Second,
		loads: make(chan messages.LoadWeights, 256), agents: map[string]*engineAgent{}, loaded: map[string]int64{}, served: map[string]bool{},
		handlers: map[int]http.Handler{}}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	if err := os.RemoveAll(h.root); err != nil {
		return nil, fmt.Errorf("node: engine host dir: %w", err)
	}
	initial, err := wiring.InitialPolicy("", uint64(cfg.Run.Seed))
	if err != nil {
		return nil, err
	}
	h.initial, h.quiet = initial, log.Level(max(log.GetLevel(), zerolog.WarnLevel))
	if h.engines, err = startEngines(cfg.Engines, initial, cfg.Run.Seed, h.quiet, h.wrap); err != nil {
		return nil, err
	}
	for i, le := range h.engines {
		le.name = hostedEngineName(node, engineEndpointKey(i))
	}
	h.current = append([]*localEngine(nil), h.engines...)
	if h.sub, err = bus.Subscribe(subj, h.onLoad); err != nil {
		h.stop()
		return nil, fmt.Errorf("node: engine host: %w", err)
	}
	h.wg.Go(h.loop)
	h.wg.Go(h.announce)
	return h, nil
}

// endpoints are the engines' URLs for the gossip metadata.
func (h *engineHost) endpoints() map[string]string {
	out := map[string]string{}
	for i, le := range h.engines {
		out[engineEndpointKey(i)] = le.url
	}
	return out
}

// wrap serves slot i's URL with the slot's current engine, and records
// an engine's first generation request (an event, so an operator or a
// test sees that traffic came only after the catch-up).
func (h *engineHost) wrap(i int, _ *engine.Engine, next http.Handler) http.Handler {
	h.mu.Lock()
	h.handlers[i] = next
	h.mu.Unlock()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		cur := h.handlers[i]
		h.mu.Unlock()
		if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/v1/") && strings.HasSuffix(r.URL.Path, "completions") {
			name := hostedEngineName(h.node, engineEndpointKey(i))
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
func (h *engineHost) freshEngine(i int) (*localEngine, error) {
	le := h.engines[i]
	e, err := engine.New(wiring.EngineConfig(h.cfg.Engines, h.cfg.Engines.ServedModelName, uint64(h.cfg.Run.Seed)+uint64(i)*0x9e3779b9), h.initial,
		engine.WithLogger(h.quiet.With().Str("engine", engineEndpointKey(i)).Logger()), engine.WithLoader(wiring.LoadPolicy))
	if err != nil {
		return nil, fmt.Errorf("node: %s: %w", le.name, err)
	}
	return &localEngine{name: le.name, e: e, url: le.url}, nil
}

func (h *engineHost) onLoad(m *transport.Msg) {
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
func termToken(baseRun, term string) uint64 {
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
func (h *engineHost) loop() {
	// failedTerm is the last term the engines could not follow: its
	// commands come again every resend, and each retries the switch, but
	// the failure is an event once per term, not every 2 s per engine.
	failedTerm := ""
	for {
		select {
		case <-h.ctx.Done():
			return
		case lw := <-h.loads:
			tok := termToken(h.baseRun, lw.RunID)
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
				a.dispatch(lw.Version)
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
func (h *engineHost) reack(a *engineAgent, version int64) {
	a.mu.Lock()
	have := a.have
	serves := !a.gone && a.want <= have && have >= version && have >= 0 && a.failed != have
	a.mu.Unlock()
	if !serves {
		return
	}
	ctx, cancel := context.WithTimeout(h.ctx, 2*time.Second)
	defer cancel()
	if err := a.ack(ctx, have); err != nil && h.ctx.Err() == nil {
		h.log.Debug().Err(err).Str("engine", a.eng.name).Int64("version", have).Msg("engine host: ack not repeated")
	}
}

// switchTerm downloads the term's base checkpoint and gives every engine
// a fresh receiver and agent for the term.
func (h *engineHost) switchTerm(lw messages.LoadWeights, tok uint64) error {
	bucket, ok := strings.CutPrefix(lw.URI, natsObjectScheme)
	if !ok || bucket == "" {
		return fmt.Errorf("LoadWeights URI %q is not %s<bucket>", lw.URI, natsObjectScheme)
	}
	ctx, cancel := context.WithTimeout(h.ctx, time.Minute)
	defer cancel()
	var st *store.NATS
	if err := retry(ctx, time.Minute, func() (err error) {
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
	if err := retry(ctx, time.Minute, func() error { return downloadPrefix(ctx, st, termBasePrefix, base) }); err != nil {
		return fmt.Errorf("base checkpoint: %w", err)
	}
	tcfg := h.cfg
	tcfg.Run.ID = lw.RunID
	h.mu.Lock()
	followed := h.term != "" // the engines served a term already
	cur := append([]*localEngine(nil), h.current...)
	hook := h.beforeApply
	h.mu.Unlock()
	agents := map[string]*engineAgent{}
	var fresh []*localEngine
	fail := func(err error) error {
		for _, a := range agents {
			a.stop()
		}
		for _, le := range fresh {
			le.e.Close()
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
		rc := receiver.DefaultConfig(filepath.Join(dir, le.name), base)
		rc.Logger = h.log.With().Str("engine", le.name).Logger()
		rcv, err := receiver.New(rc, rst)
		if err != nil {
			return fail(fmt.Errorf("receiver %s: %w", le.name, err))
		}
		de, err := driveLocal(le, h.cfg.Engines.ServedModelName)
		if err != nil {
			return fail(err)
		}
		a := newEngineAgent(i, de, rcv, hostReporter{h}, h.bus, tcfg, hook, h.log)
		a.sender = h.node
		// The callback names its term: an agent of the previous term that
		// finishes a version while the host switches must not mark the
		// slot's fresh engine loaded (announced healthy) in this one.
		term := lw.RunID
		a.onLoaded = func(name string, version int64) { h.loadedVersion(term, name, version) }
		// The engine holds no version of this term yet, not its version
		// 0: target 0 (the term's base) must be loaded too.
		a.mu.Lock()
		a.have, a.want = publisher.NoVersion, publisher.NoVersion
		a.mu.Unlock()
		agents[le.name] = a
	}
	h.mu.Lock()
	old, oldTerm, oldCur := h.agents, h.term, h.current
	h.agents, h.term, h.token = agents, lw.RunID, tok
	h.loaded = map[string]int64{}
	h.served = map[string]bool{} // each term's first request is checked against its catch-up
	h.current = cur
	for i, le := range cur {
		if le != oldCur[i] {
			h.handlers[i] = le.e.Handler()
		}
	}
	h.mu.Unlock()
	for _, a := range old {
		a.stop()
	}
	if followed {
		// The old term's engines: their requests (a deposed holder's)
		// end with "abort". A slot's first engine stops with its server.
		for i, le := range oldCur {
			if le != h.engines[i] {
				le.e.Close()
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
func (h *engineHost) loadedVersion(term, name string, version int64) {
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
func (h *engineHost) announce() {
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
		cur := append([]*localEngine(nil), h.current...)
		h.mu.Unlock()
		if term == "" {
			continue
		}
		for _, le := range cur {
			h.publishStatus(term, le, loaded[le.name])
		}
	}
}

func (h *engineHost) publishStatus(term string, le *localEngine, loaded bool) {
	st := le.e.Stats()
	hdr := messages.Header{RunID: term, Sender: h.node, Version: st.Version}
	health := messages.EngineHealth{Header: hdr, Engine: le.name, URL: le.url, Healthy: loaded && !st.Sleeping,
		Paused: st.Paused, Updating: st.Updating}
	if !loaded {
		health.Reason = "catching up to the current version"
	}
	load := messages.EngineLoad{Header: hdr, Engine: le.name, URL: le.url, Running: int32(st.Running),
		Waiting: int32(st.Waiting + st.Held), KVUsage: st.KVUsage}
	ctx, cancel := context.WithTimeout(h.ctx, 2*time.Second)
	defer cancel()
	for _, p := range []struct {
		kind transport.EngineTopic
		msg  messages.Message
	}{{transport.EngineHealth, health}, {transport.EngineLoad, load}} {
		subj, err := transport.EngineSubject(term, le.name, p.kind)
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

// stop stops the agents, the engines and the subscription. Idempotent.
func (h *engineHost) stop() {
	if h.sub != nil {
		_ = h.sub.Unsubscribe()
	}
	h.cancel()
	h.wg.Wait()
	h.mu.Lock()
	agents, cur := h.agents, h.current
	h.agents, h.current = map[string]*engineAgent{}, nil
	h.mu.Unlock()
	for _, a := range agents {
		a.stop()
	}
	for i, le := range cur {
		if le != h.engines[i] {
			le.e.Close()
		}
	}
	stopEngines(h.engines)
}

// hostReporter is the engine host's agentReporter: there is no publisher
// shell on this node, so progress is only logged (the holder's publisher
// learns from the acks on the bus).
type hostReporter struct{ h *engineHost }

func (hostReporter) Fetching(string, int64) error { return nil }
func (r hostReporter) Failed(name string, version int64, err error) {
	r.h.log.Warn().Err(err).Str("engine", name).Int64("version", version).Msg("engine host: version not loaded")
}
func (r hostReporter) Leave(name string) { r.h.event("engine %s stopped", name) }

// downloadPrefix copies every object under prefix into dir (keys relative
// to prefix), replacing dir.
func downloadPrefix(ctx context.Context, st store.Store, prefix, dir string) error {
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
