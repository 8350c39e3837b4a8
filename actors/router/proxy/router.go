package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors"
	"github.com/asyncrl/asyncrl/actors/router/front"
	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/actors/router/upstream"
)

// Router is the HTTP shell around a policy.Core: it serialises the core
// behind a mutex and carries out its decisions (forwarding, health
// checks, metric scrapes, admin changes).
type Router struct {
	cfg     Config
	log     zerolog.Logger
	tr      http.RoundTripper
	up      *upstream.Client // proxied requests when no Transport is configured; nil otherwise
	metrics *metrics
	warns   *actors.LimitedLogger // upstream warnings, per replica and message
	fronts  *front.Server         // Serve's listeners and connections

	mu       sync.Mutex
	core     *policy.Core
	budget   *policy.RetryBudget
	spans    map[string]map[*front.Span]struct{} // open version spans by replica URL
	inflight int
	closing  bool
	drained  chan struct{} // closed when closing and inflight reaches 0

	stop context.CancelFunc
	wg   sync.WaitGroup
	mux  *http.ServeMux
}

// New builds a Router, adds cfg.Replicas, and starts the health-check and
// metrics-scrape loops (stopped by Shutdown).
func New(cfg Config) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	core, err := policy.New(cfg.Policy, rand.New(rand.NewSource(time.Now().UnixNano())))
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	for _, u := range cfg.Replicas {
		if err := core.AddReplica(strings.TrimRight(u, "/")); err != nil {
			return nil, fmt.Errorf("%w: Replicas: %w", ErrInvalidConfig, err)
		}
	}
	r := &Router{
		cfg: cfg, log: cfg.Logger, tr: cfg.Transport, core: core,
		budget: policy.NewRetryBudget(cfg.RetryRatio, cfg.RetryBurst),
		spans:  make(map[string]map[*front.Span]struct{}),
		warns:  actors.NewLimitedLogger(cfg.Logger, actors.RealClock{}, warnInterval),
	}
	if r.tr == nil {
		r.up = upstream.New()
		r.tr = &http.Transport{
			Proxy:                 nil, // never route engine traffic through an env proxy
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:          1024,
			MaxIdleConnsPerHost:   256,
			IdleConnTimeout:       90 * time.Second,
			DisableCompression:    true, // pass Accept-Encoding through untouched
			ExpectContinueTimeout: time.Second,
		}
	}
	if r.metrics, err = newMetrics(cfg.Registerer, r); err != nil {
		return nil, fmt.Errorf("proxy: registering metrics: %w", err)
	}
	r.mux = http.NewServeMux()
	r.mux.HandleFunc("/admin/", r.admin)
	r.mux.HandleFunc("/finish_session", r.finishSession)
	r.mux.HandleFunc("/", r.proxy)
	r.fronts = front.New((*frontShell)(r), front.Config{
		Handler: r.mux, Upstream: r.up, MaxBodyBytes: cfg.MaxBodyBytes, IdleTimeout: cfg.IdleTimeout,
		LoopMaxAnswer: cfg.LoopMaxAnswer, Logger: cfg.Logger,
	})

	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	if cfg.HealthInterval > 0 {
		r.wg.Add(1)
		go r.loop(ctx, cfg.HealthInterval, r.checkHealth)
	}
	if cfg.MetricsInterval > 0 {
		r.wg.Add(1)
		go r.loop(ctx, cfg.MetricsInterval, r.scrapeMetrics)
	}
	return r, nil
}

// Handler returns the HTTP handler: /admin/…, POST /finish_session, and
// every other path proxied to a replica.
func (r *Router) Handler() http.Handler { return r.mux }

// Shutdown stops admitting requests (new ones get 503), waits for the
// in-flight ones to finish or ctx to end, then stops serving (Serve
// returns), stops the background loops and closes idle upstream
// connections. It returns ctx's error if in-flight
// requests were still running.
func (r *Router) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	if !r.closing {
		r.closing = true
		r.drained = make(chan struct{})
		if r.inflight == 0 {
			close(r.drained)
		}
	}
	drained := r.drained
	r.mu.Unlock()
	var err error
	select {
	case <-drained:
	case <-ctx.Done():
		err = ctx.Err()
	}
	r.fronts.Stop(ctx)
	r.stop()
	r.wg.Wait()
	if t, ok := r.tr.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
	if r.up != nil {
		r.up.CloseIdleConnections()
	}
	return err
}

// Replicas returns a snapshot of every replica.
func (r *Router) Replicas() []policy.ReplicaView {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.core.Replicas()
}

// Lookup returns where a session is.
func (r *Router) Lookup(sessionID string) (policy.SessionView, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.core.Lookup(sessionID)
}

// Apply steps the routing core with changes, in order, under one lock, so
// a batch (add, version, state, health) is seen whole by every request.
// Each change applies whole or not at all and does not stop the ones after
// it; the errors of those the core refused are joined, each a
// *policy.ChangeError naming its change. Afterwards every in-flight request
// on a replica whose version changed takes the new version into its span
// (the X-Asyncrl-Weight-Version-* headers).
func (r *Router) Apply(changes ...policy.Change) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	var errs []error
	for _, ch := range changes {
		if err := r.core.Step(now, ch); err != nil {
			errs = append(errs, err)
			continue
		}
		r.observeVersion(ch)
	}
	return errors.Join(errs...)
}

// MinVersion returns the minimum version a replica must serve.
func (r *Router) MinVersion() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.core.MinVersion()
}

// SessionCount returns the number of sessions the router tracks.
func (r *Router) SessionCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.core.SessionCount()
}

// Replica returns a snapshot of one replica, if present.
func (r *Router) Replica(url string) (policy.ReplicaView, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.core.Replica(url)
}

// finishSession handles POST /finish_session?session_id=… (SkyRL).
func (r *Router) finishSession(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		writeError(w, http.StatusMethodNotAllowed, "use POST")
		return
	}
	id := req.URL.Query().Get("session_id")
	if id == "" {
		writeError(w, http.StatusBadRequest, "session_id is required")
		return
	}
	r.mu.Lock()
	released := r.core.Finish(time.Now(), id)
	r.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"session_id": id, "released": released})
}

// writeError writes a vLLM/OpenAI-style JSON error.
func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, front.ErrorValue(code, msg))
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
