package engine

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/engine/latency"
	"github.com/asyncrl/asyncrl/model/sampler"
)

// Option customises New.
type Option func(*Engine)

// WithLoader sets the loader used by /update_weights and LoRA loading.
func WithLoader(l ModelLoader) Option { return func(e *Engine) { e.loader = l } }

// WithLogger sets the engine's logger (default zerolog.Nop()).
func WithLogger(l zerolog.Logger) Option { return func(e *Engine) { e.log = l } }

// WithRegistry makes the engine register its metrics on r and serve r on
// /metrics. By default every engine gets its own registry, so several
// engines can live in one process.
func WithRegistry(r *prometheus.Registry) Option { return func(e *Engine) { e.reg = r } }

// Engine is the built-in inference engine: a continuous-batching loop (the
// shell around latency.Scheduler) that computes real tokens with a Model,
// plus the vLLM-compatible HTTP API around it.
type Engine struct {
	cfg    Config
	log    zerolog.Logger
	loader ModelLoader
	// adapterLoader (WithAdapterLoader) reads PEFT LoRA adapters, applied
	// onto the served model.
	adapterLoader AdapterLoader
	reg           *prometheus.Registry
	// apiKey (WithAPIKey) guards every route; roots (WithWeightRoots)
	// bound the paths weights load from.
	apiKey string
	roots  []string
	met    *metrics
	// xform (WithModelTransform) turns every model given to the engine
	// into the one it serves.
	xformName string
	xform     ModelTransform
	// codec is the text side (WithTokenizer, text.go); nil = the
	// character tokenizer.
	codec textCodec

	// loraMu serialises what derives a model from the served one (a PEFT
	// adapter's apply) with what replaces the served one (SetModel), so an
	// adapter is never installed onto a base that was swapped meanwhile.
	// Taken before mu, never while holding it.
	loraMu sync.Mutex

	mu        sync.Mutex
	core      *latency.Scheduler
	model     Model
	version   int64
	loras     map[string]Model
	adapters  map[string]Adapter   // the PEFT adapters among loras, re-applied on every base swap
	seqs      map[uint64]*seqState // in the core
	held      []*seqState          // submitted while paused/sleeping
	groups    map[string]*group
	paused    bool
	pauseMode string
	sleeping  bool
	updating  bool
	closed    bool
	nextID    uint64
	rng       *rand.Rand
	jobs      []job
	bufs      []*workerBuf
	logitBufs [][]float32 // batched-forward logits, by job index
	batch     batchState
	carry     time.Duration // compute time of the last step, owed by the next sleep
	pending   *latency.Plan
	tick      chan struct{} // closed and replaced after every change
	prompts   int64
	servers   []*http.Server
	ckptDir   string // the checkpoint the served weights came from ("" = unknown)

	delta deltaState // ApplyDelta's working copy

	wake chan struct{}
	stop chan struct{}
	done chan struct{}
}

type group struct {
	id     string
	notify chan struct{} // cap 1: something changed for one of seqs
	seqs   []*seqState
}

type seqState struct {
	g         *group
	id        uint64
	index     int
	lora      string
	prompt    []int32
	all       []int32 // prompt then generated
	out       []int32
	lps       []float32
	vers      []int64
	support   [][]int32
	slps      []float32 // support-normalised logprobs (filtered only)
	top       [][]topEntry
	text      []byte // decoded completion text, stop string removed
	codec     textCodec
	params    sampler.Params
	filtered  bool
	rng       *rand.Rand
	maxTokens int
	ignoreEOS bool
	stops     []string
	nTop      int // top alternatives per token; -1 = none
	cached    int
	finish    string // "" while live
	// routes: return_routed_experts; routeRows holds the rows of positions
	// [routeStart, len(all)-1), captured with the model of each step.
	routes     bool
	routeStart int
	routeRows  []int32
	routeShape [3]int // layers, top_k, experts of the route model
	// kv is the sequence's cache in kvModel (a BatchModel), nil until
	// its first batched step; a cache of another model is rebuilt.
	kv      SeqCache
	kvModel BatchModel
}

type topEntry struct {
	id int32
	lp float32
}

// New builds an engine serving model at cfg's initial version 0. model may
// be nil: the engine then answers /health with 503 until SetModel or
// /update_weights loads one. New starts the batching loop; stop it with
// Shutdown or Close.
func New(cfg Config, model Model, opts ...Option) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Engine{
		cfg:      cfg,
		log:      zerolog.Nop(),
		core:     latency.New(cfg.Latency),
		loras:    map[string]Model{},
		adapters: map[string]Adapter{},
		seqs:     map[uint64]*seqState{},
		groups:   map[string]*group{},
		rng:      rand.New(rand.NewPCG(cfg.Seed, 0x5eed)),
		tick:     make(chan struct{}),
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	for _, o := range opts {
		o(e)
	}
	if e.reg == nil {
		e.reg = prometheus.NewRegistry()
	}
	model, err := e.transform(model)
	if err != nil {
		return nil, err
	}
	if model != nil {
		e.model = model
	}
	met, err := newMetrics(e)
	if err != nil {
		return nil, err
	}
	e.met = met
	go e.loop()
	return e, nil
}

// Registry is the registry /metrics serves.
func (e *Engine) Registry() *prometheus.Registry { return e.reg }

// Version is the weight version being served.
func (e *Engine) Version() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.version
}

// SetModel swaps in new weights at version. Versions never decrease
// (ErrVersionDecrease); an equal version re-installs. Running sequences keep
// going and their later tokens come from m. The prefix cache is reset: KV
// computed under the old weights must not be reused.
func (e *Engine) SetModel(m Model, version int64) error {
	if m == nil {
		return fmt.Errorf("engine: SetModel with a nil model")
	}
	m, err := e.transform(m)
	if err != nil {
		return err
	}
	e.loraMu.Lock()
	defer e.loraMu.Unlock()
	rebased, failed := e.rebaseAdapters(m)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrClosed
	}
	if e.model != nil && version < e.version {
		return fmt.Errorf("%w: serving %d, got %d", ErrVersionDecrease, e.version, version)
	}
	e.model, e.version, e.ckptDir = m, version, ""
	for name, am := range rebased {
		e.loras[name] = am
	}
	for name, err := range failed {
		delete(e.loras, name)
		delete(e.adapters, name)
		e.log.Error().Err(err).Str("lora", name).Int64("version", version).Msg("LoRA adapter does not fit the new weights; unloaded")
	}
	e.core.ResetPrefixCache()
	e.log.Info().Int64("version", version).Msg("weights updated")
	e.changedLocked()
	return nil
}

// LoadWeights loads dir with the configured loader and serves it at version.
func (e *Engine) LoadWeights(dir string, version int64) error {
	if e.loader == nil {
		return ErrNoLoader
	}
	if err := e.allowPath("checkpoint", dir); err != nil {
		return err
	}
	e.mu.Lock()
	cur, loaded := e.version, e.model != nil
	e.mu.Unlock()
	if loaded && version < cur { // fail before an expensive load
		return fmt.Errorf("%w: serving %d, got %d", ErrVersionDecrease, cur, version)
	}
	m, err := e.loader(dir)
	if err != nil {
		return fmt.Errorf("engine: load weights from %s: %w", dir, err)
	}
	if err := e.SetModel(m, version); err != nil {
		return err
	}
	e.mu.Lock()
	if e.version == version {
		e.ckptDir = dir
	}
	e.mu.Unlock()
	return nil
}

// Serve serves the HTTP API on ln until ctx ends or Shutdown is called,
// then shuts the server down gracefully. It returns nil on a clean stop.
func (e *Engine) Serve(ctx context.Context, ln net.Listener) error {
	if err := e.CheckListen(ln.Addr().String()); err != nil {
		return err
	}
	srv := &http.Server{Handler: e.Handler(), ReadHeaderTimeout: 10 * time.Second}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return ErrClosed
	}
	e.servers = append(e.servers, srv)
	e.mu.Unlock()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e.abortAll()
		err := srv.Shutdown(sctx)
		<-errc
		return err
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	}
}

// ListenAndServe binds addr (default 127.0.0.1:8000 when empty) and Serves.
func (e *Engine) ListenAndServe(ctx context.Context, addr string) error {
	if addr == "" {
		addr = "127.0.0.1:8000"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("engine: listen %s: %w", addr, err)
	}
	return e.Serve(ctx, ln)
}

// Shutdown aborts in-flight requests (finish_reason "abort"), shuts down
// the HTTP servers started by Serve, and stops the batching loop.
func (e *Engine) Shutdown(ctx context.Context) error {
	e.abortAll()
	e.mu.Lock()
	srvs := e.servers
	e.servers = nil
	e.mu.Unlock()
	var err error
	for _, s := range srvs {
		err = errors.Join(err, s.Shutdown(ctx))
	}
	e.Close()
	return err
}

// Close stops the batching loop, ending every live request with "abort".
// It is idempotent and does not wait for HTTP servers (see Shutdown).
func (e *Engine) Close() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		<-e.done
		return
	}
	e.closed = true
	e.abortLocked(nil, true)
	e.mu.Unlock()
	close(e.stop)
	<-e.done
	e.removeWorkDir()
}

func (e *Engine) abortAll() {
	e.mu.Lock()
	e.abortLocked(nil, true)
	e.mu.Unlock()
}

// changedLocked wakes the loop and every waiter on tick.
func (e *Engine) changedLocked() {
	close(e.tick)
	e.tick = make(chan struct{})
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// canRunLocked: the loop may compute tokens.
func (e *Engine) canRunLocked() bool {
	return e.model != nil && !e.sleeping && !e.closed && !(e.paused && e.pauseMode != "wait")
}

// abortLocked ends the groups named by ids (all when ids is empty);
// includeHeld also ends requests held by a pause.
func (e *Engine) abortLocked(ids []string, includeHeld bool) int {
	n := 0
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	for gid, g := range e.groups {
		if len(ids) > 0 && !want[gid] {
			continue
		}
		for _, s := range g.seqs {
			if s.finish != "" {
				continue
			}
			if !includeHeld && e.seqs[s.id] == nil {
				continue
			}
			e.finishLocked(s, "abort")
			n++
		}
	}
	if n > 0 {
		e.changedLocked()
	}
	return n
}

// submit registers a group; its sequences enter the core now, or when the
// engine resumes/wakes.
func (e *Engine) submit(g *group) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrClosed
	}
	// Same rule as the core's: only sequences beyond the free seats wait,
	// and while paused or sleeping no seat frees up.
	st := e.core.Stats()
	free := 0
	if !e.paused && !e.sleeping {
		free = max(0, e.cfg.Latency.MaxNumSeqs-st.Running)
	}
	if st.Waiting+len(e.held)+len(g.seqs)-free > e.cfg.Latency.MaxWaiting {
		return latency.ErrQueueFull
	}
	if _, dup := e.groups[g.id]; dup {
		return fmt.Errorf("%w: %q", errDuplicateRequest, g.id)
	}
	e.groups[g.id] = g
	for _, s := range g.seqs {
		e.nextID++
		s.id = e.nextID
		if e.paused || e.sleeping {
			e.held = append(e.held, s)
			continue
		}
		e.addLocked(s)
	}
	for _, s := range g.seqs {
		e.prompts += int64(len(s.prompt))
	}
	e.changedLocked()
	return nil
}

var errDuplicateRequest = errors.New("engine: duplicate request id")

func (e *Engine) addLocked(s *seqState) {
	salt := uint64(0)
	if s.lora != "" {
		h := fnv.New64a()
		h.Write([]byte(s.lora))
		salt = h.Sum64()
	}
	if err := e.core.Add(latency.Request{ID: s.id, Prompt: s.all, MaxTokens: s.maxTokens - len(s.out), Salt: salt}); err != nil {
		e.log.Warn().Err(err).Uint64("seq", s.id).Msg("could not queue sequence")
		e.finishLocked(s, "abort")
		return
	}
	e.seqs[s.id] = s
}

// releaseHeldLocked moves held sequences into the core, in arrival order.
func (e *Engine) releaseHeldLocked() {
	held := e.held
	e.held = nil
	for _, s := range held {
		if s.finish == "" {
			e.addLocked(s)
		}
	}
}
