package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors/publisher/tracker"
	"github.com/asyncrl/asyncrl/actors/router/proxy"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/tinker"
)

// Trainer is one trainable model, as a training backend provides it
// (tinker/gotrain's Model, tinker/bridgetrain's). A Trainer that is an
// io.Closer is closed when its model goes away.
type Trainer interface {
	ForwardBackward(in *tinker.ForwardBackwardInput, backward bool) (tinker.ForwardBackwardOutput, error)
	OptimStep(p tinker.AdamParams) (map[string]float64, error)
	SaveState(dir string) error
	LoadState(dir string, optimizer bool) error
	SaveSampler(dir string) error
}

// Backend makes trainable models on the base model.
type Backend interface {
	NewModel(rank int, seed int64) (Trainer, error)
	// VocabSize and MaxSeqLen bound token ids and lengths in requests.
	VocabSize() int
	MaxSeqLen() int
	// Arch and TokenizerID describe the base model (get_info).
	Arch() string
	TokenizerID() string
}

// Config is what the server needs besides config.TinkerConfig.
type Config struct {
	Tinker config.TinkerConfig
	// BaseModel is the name of the one base model served.
	BaseModel string
	// Backend trains models.
	Backend Backend
	// EngineURLs are the vLLM-compatible engines sampled on at the start
	// (AddEngine and RemoveEngine change the set: a cluster node's tinker
	// role follows its members' engines). Requests reach them through
	// the server's router (route.go).
	EngineURLs []string
	// DataDir holds checkpoints and spilled future results.
	DataDir string
	// NATS is the connection to the JetStream that stores training futures.
	NATS *nats.Conn
	// APIKey, when set, is required in X-API-Key on every route but healthz.
	APIKey string
	// EngineAPIKey, when set, is sent to the engines as "Authorization:
	// Bearer" (engines.api_key_file: the built-in engines' key, vLLM's
	// --api-key), on samples, adapter and checkpoint loads.
	EngineAPIKey string
	// FutureTTL is how long training futures stay in JetStream (default 7 days).
	FutureTTL time.Duration
	// FutureKeyPrefix prefixes this server's keys in the futures bucket
	// ("<node>." on a cluster node, "" standalone): servers sharing the
	// bucket never recover each other's futures.
	FutureKeyPrefix string
	// FutureReplicas is the bucket's replication (default 1; a cluster
	// node's --replicas).
	FutureReplicas int
	Log            zerolog.Logger
	// Registry receives the asyncrl_tinker_* metrics (nil: a private one).
	Registry *prometheus.Registry
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Server is the Tinker API shell: HTTP handlers over the tinker core.
type Server struct {
	cfg   Config
	now   func() time.Time
	log   zerolog.Logger
	store *futureStore

	mu      sync.Mutex
	core    *tinker.Core
	waiters map[string]chan struct{}
	models  map[string]*modelWorker

	samples *samplePool
	met     *metrics
	stop    chan struct{}
	wg      sync.WaitGroup
	closed  atomic.Bool
	handler http.Handler

	// router is the sampling router, served at routerURL by routerSrv.
	router    *proxy.Router
	routerURL string
	routerSrv *http.Server
	// engMu guards the engine set and the adapters loaded on all of it
	// (held across the loads, so an engine that joins while an adapter
	// loads gets it too).
	engMu       sync.Mutex
	engines     []string
	adapterDirs map[string]string // adapter name → checkpoint dir
	published   versionState      // sampler_weights: version
	// versions is the version tracker of sampler_weights: version (the
	// engines' versions, the router's minimum; version.go).
	versions *tracker.Tracker
}

// New opens the training-future store (marking futures a previous process
// left pending as failed) and starts the sample workers and the session
// sweeper.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Backend == nil || cfg.NATS == nil || cfg.DataDir == "" || cfg.BaseModel == "" {
		return nil, errors.New("tinker: server needs a backend, a NATS connection, a data dir and a base model name")
	}
	if err := cfg.Tinker.Validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.FutureTTL == 0 {
		cfg.FutureTTL = 7 * 24 * time.Hour
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	versions, err := tracker.New(tracker.DefaultConfig())
	if err != nil {
		return nil, err
	}
	st, err := openStore(ctx, cfg.NATS, cfg.FutureKeyPrefix, cfg.FutureReplicas, cfg.DataDir+"/futures", cfg.FutureTTL)
	if err != nil {
		return nil, err
	}
	n, err := st.recover(ctx, cfg.Now())
	if err != nil {
		return nil, err
	}
	t := cfg.Tinker
	s := &Server{cfg: cfg, now: cfg.Now, log: cfg.Log, store: st, versions: versions,
		core: tinker.NewCore(tinker.Limits{SessionTimeout: t.SessionTimeout, ResultTTL: t.SampleResultTTL,
			ResultMaxBytes: t.SampleResultMaxBytes, MaxModelsPerSession: t.MaxModelsPerSession,
			MaxPendingPerSession: t.MaxPendingPerSession}),
		waiters: map[string]chan struct{}{}, models: map[string]*modelWorker{}, stop: make(chan struct{}),
		adapterDirs: map[string]string{}}
	if n > 0 {
		s.log.Warn().Int("futures", n).Msg("training futures left pending by the previous server marked failed")
	}
	s.met = newMetrics(cfg.Registry, s)
	s.met.recovered.Add(float64(n))
	s.samples = newSamplePool(s, t.SampleQueue, t.SampleConcurrency)
	if err := s.startRouter(cfg.EngineURLs); err != nil {
		s.samples.close()
		s.stopRouter()
		return nil, err
	}
	s.handler = s.routes()
	s.wg.Add(1)
	go s.sweep()
	return s, nil
}

// Handler is the HTTP API.
func (s *Server) Handler() http.Handler { return s.handler }

// Close stops the workers; pending training futures stay pending in the
// store (the next server marks them failed).
func (s *Server) Close() {
	if s.closed.Swap(true) {
		return
	}
	close(s.stop)
	s.samples.close()
	s.stopRouter()
	s.mu.Lock()
	ws := s.models
	s.models = map[string]*modelWorker{}
	s.mu.Unlock()
	for _, w := range ws {
		w.close(nil)
	}
	s.wg.Wait()
}

// sweep ticks the core: session timeouts unload models, old results go.
func (s *Server) sweep() {
	defer s.wg.Done()
	tk := time.NewTicker(time.Second)
	defer tk.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tk.C:
		}
		s.mu.Lock()
		exp := s.core.Tick(s.now())
		var stop []*modelWorker
		for _, e := range exp {
			for _, m := range e.Models {
				if w := s.models[m]; w != nil {
					stop = append(stop, w)
					delete(s.models, m)
				}
			}
		}
		s.mu.Unlock()
		for _, w := range stop {
			w.close(errf("the model's session timed out (no heartbeat for %s) and the model was unloaded", s.cfg.Tinker.SessionTimeout))
		}
		for _, e := range exp {
			s.log.Info().Str("session", e.SessionID).Strs("models", e.Models).Msg("session timed out without a heartbeat; its models are unloaded")
			s.met.sessionsExpired.Inc()
		}
	}
}

// newID returns prefix + 16 random hex digits.
func newID(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// complete records a result in the core and wakes retrieve_future calls
// waiting for it.
func (s *Server) complete(id string, body []byte, failed bool) {
	s.mu.Lock()
	s.core.Complete(s.now(), id, body, failed)
	ch := s.waiters[id]
	delete(s.waiters, id)
	s.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

func failure(msg, category string) tinker.RequestFailedResponse {
	return tinker.RequestFailedResponse{Error: msg, Category: category}
}

func errf(format string, a ...any) error { return fmt.Errorf(format, a...) }

// PendingFutures is the number of unfinished futures (the load benchmark
// reads its peak).
func (s *Server) PendingFutures() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.core.Pending()
}
