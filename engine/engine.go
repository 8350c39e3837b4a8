package engine

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/engine/latency"
	"github.com/asyncrl/asyncrl/policy/sampler"
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

// loop is the batching actor: plan a step, sleep its scaled duration, then
// compute its tokens. Computing after the sleep means a client sees a token
// no earlier than the modelled GPU would have produced it, and a keep-mode
// pause that lands during the sleep makes the step's tokens come from the
// weights installed before resume.
func (e *Engine) loop() {
	defer close(e.done)
	for {
		e.mu.Lock()
		if e.pending == nil && e.canRunLocked() {
			p := e.core.Schedule()
			if len(p.Emits) > 0 {
				e.pending = &p
			}
		}
		if e.pending == nil || !e.canRunLocked() {
			e.mu.Unlock()
			select {
			case <-e.wake:
				continue
			case <-e.stop:
				return
			}
		}
		// The real compute of the previous step already took time the
		// modelled GPU would have spent; sleep only the remainder.
		d := time.Duration(float64(e.pending.Duration)*e.cfg.TimeScale) - e.carry
		e.mu.Unlock()
		if d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-e.stop:
				t.Stop()
				return
			}
		} else {
			select {
			case <-e.stop:
				return
			default:
			}
		}
		e.mu.Lock()
		if e.canRunLocked() {
			start := time.Now()
			e.executeLocked(e.pending)
			e.pending = nil
			e.carry = 0
			if e.cfg.TimeScale > 0 {
				e.carry = time.Since(start)
			}
		}
		e.mu.Unlock()
	}
}

// executeLocked computes one token for each sequence in the step. Logits
// are computed in parallel across sequences (Model is safe for concurrent
// use; each sequence owns its RNG), then results are applied in plan order.
func (e *Engine) executeLocked(p *latency.Plan) {
	jobs := e.jobs[:0]
	for _, em := range p.Emits {
		s := e.seqs[em.ID]
		if s == nil {
			continue // aborted during the step
		}
		m := e.model
		if s.lora != "" {
			m = e.loras[s.lora]
			if m == nil {
				e.finishLocked(s, "abort")
				continue
			}
		}
		if em.First {
			s.cached = em.CachedTokens
			e.met.ttft.Observe(em.SinceArrival.Seconds())
		}
		jobs = append(jobs, job{s: s, m: m})
	}
	e.jobs = jobs
	e.batchJobs(jobs)
	e.runJobs(jobs, e.version)
	for _, j := range jobs {
		s := j.s
		if j.err != nil {
			e.finishLocked(s, "abort")
			continue
		}
		e.core.Append(s.id, s.out[len(s.out)-1])
		if reason := e.stopReason(s, j.m); reason != "" {
			if d, ok := e.core.SinceArrival(s.id); ok {
				e.met.e2e.Observe(d.Seconds())
			}
			e.finishLocked(s, reason)
		} else {
			notify(s.g)
		}
	}
	e.changedLocked()
}

type job struct {
	s *seqState
	m Model
	// pre holds the logits a batched Forward computed (BatchModel); err
	// is its failure (the sequence is aborted).
	pre []float32
	err error
}

// workerBuf is one decoding worker's reusable memory.
type workerBuf struct {
	logits, lsm []float32
	scratch     sampler.Scratch
}

// runJobs decodes one token per job on up to GOMAXPROCS goroutines; each
// worker touches only its own jobs' sequences and its own buffers.
func (e *Engine) runJobs(jobs []job, version int64) {
	w := min(runtime.GOMAXPROCS(0), len(jobs), maxWorkers)
	for len(e.bufs) < w {
		e.bufs = append(e.bufs, &workerBuf{})
	}
	if w <= 1 {
		for _, j := range jobs {
			if j.err == nil {
				decodeOne(j.s, j.m, e.bufs[0], version, j.pre)
			}
		}
		return
	}
	var wg sync.WaitGroup
	for k := 0; k < w; k++ {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			for i := k; i < len(jobs); i += w {
				if jobs[i].err == nil {
					decodeOne(jobs[i].s, jobs[i].m, e.bufs[k], version, jobs[i].pre)
				}
			}
		}(k)
	}
	wg.Wait()
}

const maxWorkers = 64

// decodeOne samples s's next token from pre, the logits a batched Forward
// computed, or (nil) from m.NextLogits over s's tokens.
func decodeOne(s *seqState, m Model, b *workerBuf, version int64, pre []float32) {
	v := m.VocabSize()
	if cap(b.logits) < v {
		b.logits = make([]float32, v)
		b.lsm = make([]float32, v)
	}
	logits := b.logits[:v]
	if pre != nil {
		logits = pre
	} else {
		m.NextLogits(s.all, logits)
	}
	if s.routes {
		captureRoutes(s, m)
	}
	tok, lp, sup := sampler.Sample(logits, s.params, s.rng, &b.scratch)
	if s.filtered {
		var keep []int32
		if sup == nil { // filter active but keeps the whole vocabulary
			keep = make([]int32, v)
			for i := range keep {
				keep[i] = int32(i)
			}
		} else {
			keep = append([]int32(nil), sup...)
		}
		s.support = append(s.support, keep)
		// From the same logits and support the trainer replays: the
		// support-normalised logprob a normalize_over_support trainer
		// compares its own against.
		s.slps = append(s.slps, finiteLP(sampler.SupportLogProb(logits, s.params.Temperature, keep, tok)))
	}
	if s.nTop >= 0 {
		ls := sampler.LogSoftmax(logits, s.params.Temperature, b.lsm)
		s.top = append(s.top, topK(ls, s.nTop))
	}
	s.out = append(s.out, tok)
	s.all = append(s.all, tok)
	s.lps = append(s.lps, finiteLP(lp))
	s.vers = append(s.vers, version)
	s.text = s.codec.appendText(s.text, tok)
}

// topK returns the k highest logprobs, descending, ties by lower id.
func topK(ls []float32, k int) []topEntry {
	k = min(k, len(ls))
	if k == 0 {
		return []topEntry{}
	}
	idx := make([]int32, len(ls))
	for i := range idx {
		idx[i] = int32(i)
	}
	sort.SliceStable(idx, func(a, b int) bool { return ls[idx[a]] > ls[idx[b]] })
	out := make([]topEntry, k)
	for i := range out {
		out[i] = topEntry{idx[i], finiteLP(ls[idx[i]])}
	}
	return out
}

// stopReason says whether s just finished: EOS (m's EOSIDs when it is an
// EOSModel), a stop string (removed from the text), max_tokens or the
// context limit.
func (e *Engine) stopReason(s *seqState, m Model) string {
	last := s.out[len(s.out)-1]
	if isEOS(m, last, s.codec) && !s.ignoreEOS {
		return "stop"
	}
	if i := stopIndex(s, last); i >= 0 {
		s.text = s.text[:i]
		return "stop"
	}
	if len(s.out) >= s.maxTokens {
		return "length"
	}
	return ""
}

// maxLen is the context limit for sequences served by m.
func (e *Engine) maxLen(m Model) int {
	n := e.cfg.MaxModelLen
	if m != nil && m.MaxSeqLen() > 0 && (n == 0 || m.MaxSeqLen() < n) {
		n = m.MaxSeqLen()
	}
	return n
}

func notify(g *group) {
	select {
	case g.notify <- struct{}{}:
	default:
	}
}

// finishLocked ends s with reason and removes it from the core.
func (e *Engine) finishLocked(s *seqState, reason string) {
	if s.finish != "" {
		return
	}
	s.finish = reason
	e.core.Finish(s.id)
	delete(e.seqs, s.id)
	for i, h := range e.held {
		if h == s {
			e.held = append(e.held[:i], e.held[i+1:]...)
			break
		}
	}
	done := true
	for _, x := range s.g.seqs {
		if x.finish == "" {
			done = false
		}
	}
	if done {
		delete(e.groups, s.g.id)
	}
	notify(s.g)
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

// Pause stops the engine in one of vLLM's modes: "keep" freezes queued and
// running requests (they continue after Resume, with whatever weights are
// then installed); "abort" ends in-flight requests now with their partial
// output and finish_reason "abort"; "wait" lets in-flight requests finish
// and returns when they have (or ctx ends). New requests wait for Resume in
// every mode. clearCache drops the prefix cache.
func (e *Engine) Pause(ctx context.Context, mode string, clearCache bool) error {
	switch mode {
	case "", "keep", "abort", "wait":
	default:
		return fmt.Errorf("engine: pause mode must be keep, abort or wait, got %q", mode)
	}
	if mode == "" {
		mode = "keep"
	}
	e.mu.Lock()
	e.paused, e.pauseMode = true, mode
	if mode == "abort" {
		e.abortLocked(nil, false)
	}
	if clearCache {
		e.core.ResetPrefixCache()
	}
	e.changedLocked()
	if mode != "wait" {
		e.mu.Unlock()
		return nil
	}
	for len(e.seqs) > 0 {
		tick := e.tick
		e.mu.Unlock()
		select {
		case <-tick:
		case <-ctx.Done():
			return ctx.Err()
		}
		e.mu.Lock()
	}
	e.mu.Unlock()
	return nil
}

// Resume undoes Pause: frozen requests continue and held ones are queued.
func (e *Engine) Resume() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.paused, e.pauseMode = false, ""
	if !e.sleeping {
		e.releaseHeldLocked()
	}
	e.changedLocked()
}

// IsPaused reports whether the engine is paused.
func (e *Engine) IsPaused() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.paused
}

// Sleep freezes the engine like a keep-mode pause and drops the prefix
// cache (vLLM frees the KV cache when sleeping).
func (e *Engine) Sleep() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sleeping = true
	e.core.ResetPrefixCache()
	e.changedLocked()
}

// WakeUp undoes Sleep.
func (e *Engine) WakeUp() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sleeping = false
	if !e.paused {
		e.releaseHeldLocked()
	}
	e.changedLocked()
}

// IsSleeping reports whether the engine sleeps.
func (e *Engine) IsSleeping() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sleeping
}

// Abort ends the named requests (all when ids is empty), including ones
// held by a pause, and returns how many sequences it ended.
func (e *Engine) Abort(ids []string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.abortLocked(ids, true)
}

// ResetPrefixCache forgets every cached prefix.
func (e *Engine) ResetPrefixCache() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.core.ResetPrefixCache()
}

// LoadLoRA serves the adapter at path as model name, replacing one of
// that name. A PEFT adapter directory (adapter_config.json, IsPEFTAdapter)
// is read with the AdapterLoader and applied onto the served model (and
// re-applied onto each later one: WithAdapterLoader); any other path is
// loaded whole with the ModelLoader (and the ModelTransform), a model
// served beside the base.
func (e *Engine) LoadLoRA(name, path string) error {
	if err := e.allowPath("LoRA adapter", path); err != nil {
		return err
	}
	if IsPEFTAdapter(path) {
		return e.loadAdapter(name, path)
	}
	if e.loader == nil {
		return ErrNoLoader
	}
	m, err := e.loader(path)
	if err == nil {
		m, err = e.transform(m)
	}
	if err != nil {
		return fmt.Errorf("engine: load LoRA %q from %s: %w", name, path, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.loras[name] = m
	delete(e.adapters, name) // a whole model now: nothing to re-apply
	return nil
}

// UnloadLoRA stops serving an adapter; its live requests end with "abort".
func (e *Engine) UnloadLoRA(name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.loras[name]
	delete(e.loras, name)
	delete(e.adapters, name)
	return ok
}

// Stats is a snapshot of the engine for in-process callers (the same
// numbers /metrics exposes).
type Stats struct {
	latency.Stats
	// Held counts sequences waiting for Resume/WakeUp outside the queue.
	Held     int
	Version  int64
	Paused   bool
	Sleeping bool
	Loaded   bool
	// Updating is true between /start_weight_update and
	// /finish_weight_update (informational: the engine keeps serving).
	Updating bool
}

// Stats returns a snapshot of the engine's load and state.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return Stats{Stats: e.core.Stats(), Held: len(e.held), Version: e.version, Paused: e.paused, Sleeping: e.sleeping, Loaded: e.model != nil, Updating: e.updating}
}
