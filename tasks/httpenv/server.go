package httpenv

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/tasks"
)

// ServerConfig configures a Server.
type ServerConfig struct {
	// MaxEpisodes bounds the live (reset, not yet done) episodes; a Reset
	// beyond it gets 503 too_many_episodes. A client that never finishes its
	// episodes then fails loudly instead of growing the server without end.
	MaxEpisodes int
	// EpisodeTTL drops an episode idle for longer (its client is gone). 0
	// keeps episodes until done or closed. Expired episodes are swept when
	// the table is full, so no background goroutine is needed.
	EpisodeTTL time.Duration
	// MaxBodyBytes bounds a request body (actions and prompts are short).
	MaxBodyBytes int64
	// Logger receives one line per failed request at debug level.
	Logger zerolog.Logger
}

// DefaultServerConfig: 4096 live episodes, 10-minute TTL, 1 MiB bodies.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{MaxEpisodes: 4096, EpisodeTTL: 10 * time.Minute, MaxBodyBytes: 1 << 20, Logger: zerolog.Nop()}
}

// Validate names the first invalid field.
func (c ServerConfig) Validate() error {
	switch {
	case c.MaxEpisodes < 1:
		return fmt.Errorf("httpenv: ServerConfig.MaxEpisodes %d: want >= 1", c.MaxEpisodes)
	case c.EpisodeTTL < 0:
		return fmt.Errorf("httpenv: ServerConfig.EpisodeTTL %v: want >= 0", c.EpisodeTTL)
	case c.MaxBodyBytes < 1:
		return fmt.Errorf("httpenv: ServerConfig.MaxBodyBytes %d: want >= 1", c.MaxBodyBytes)
	}
	return nil
}

// Server exposes a tasks.Task over HTTP (see the package doc). It is an
// http.Handler; Serve runs it on a listener.
type Server struct {
	task tasks.Task
	cfg  ServerConfig
	now  func() time.Time // wall clock; tests substitute it

	mu       sync.Mutex
	episodes map[string]*episode
}

type episode struct {
	mu       sync.Mutex // one Step at a time: an Env is not safe for concurrent use
	env      tasks.Env
	lastUsed time.Time // guarded by Server.mu
}

// NewServer serves task with cfg.
func NewServer(task tasks.Task, cfg ServerConfig) (*Server, error) {
	if task == nil {
		return nil, errors.New("httpenv: nil task")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Server{task: task, cfg: cfg, now: time.Now, episodes: map[string]*episode{}}, nil
}

// Episodes returns the number of live episodes.
func (s *Server) Episodes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.episodes)
}

// ServeHTTP implements the protocol.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case PathInfo:
		if r.Method != http.MethodGet {
			s.fail(w, r, http.StatusMethodNotAllowed, CodeMethod, "use GET for "+PathInfo)
			return
		}
		writeJSON(w, http.StatusOK, Info{Name: s.task.Name(), MaxTurns: s.task.MaxTurns(), MaxTokensPerTurn: s.task.MaxTokensPerTurn()})
	case PathReset, PathStep, PathClose:
		if r.Method != http.MethodPost {
			s.fail(w, r, http.StatusMethodNotAllowed, CodeMethod, "use POST for "+r.URL.Path)
			return
		}
		switch r.URL.Path {
		case PathReset:
			s.reset(w, r)
		case PathStep:
			s.step(w, r)
		default:
			s.close(w, r)
		}
	default:
		s.fail(w, r, http.StatusNotFound, CodeNotFound, fmt.Sprintf("no such path %q (have %s, %s, %s, %s)", r.URL.Path, PathInfo, PathReset, PathStep, PathClose))
	}
}

func (s *Server) reset(w http.ResponseWriter, r *http.Request) {
	var req ResetRequest
	if !s.decode(w, r, &req) {
		return
	}
	env := s.task.NewEnv()
	obs, err := env.Reset(req.Prompt)
	if err != nil {
		code := CodeEnvError
		if errors.Is(err, tasks.ErrBadPrompt) {
			code = CodeBadPrompt
		}
		s.fail(w, r, http.StatusBadRequest, code, err.Error())
		return
	}
	id := rand.Text()
	now := s.now()
	s.mu.Lock()
	if len(s.episodes) >= s.cfg.MaxEpisodes {
		s.sweepLocked(now)
	}
	full := len(s.episodes) >= s.cfg.MaxEpisodes
	if !full {
		s.episodes[id] = &episode{env: env, lastUsed: now}
	}
	s.mu.Unlock()
	if full {
		s.fail(w, r, http.StatusServiceUnavailable, CodeTooManyEpisodes,
			fmt.Sprintf("%d live episodes (ServerConfig.MaxEpisodes); finish or close some", s.cfg.MaxEpisodes))
		return
	}
	writeJSON(w, http.StatusOK, ResetResponse{EpisodeID: id, Observation: obs})
}

// sweepLocked drops episodes idle for longer than the TTL.
func (s *Server) sweepLocked(now time.Time) {
	if s.cfg.EpisodeTTL <= 0 {
		return
	}
	for id, ep := range s.episodes {
		if now.Sub(ep.lastUsed) > s.cfg.EpisodeTTL {
			delete(s.episodes, id)
		}
	}
}

// lookup returns the live episode id and marks it used; nil if unknown or
// expired.
func (s *Server) lookup(id string) *episode {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	ep := s.episodes[id]
	if ep == nil {
		return nil
	}
	if s.cfg.EpisodeTTL > 0 && now.Sub(ep.lastUsed) > s.cfg.EpisodeTTL {
		delete(s.episodes, id)
		return nil
	}
	ep.lastUsed = now
	return ep
}

func (s *Server) unknownEpisode(w http.ResponseWriter, r *http.Request, id string) {
	s.fail(w, r, http.StatusNotFound, CodeUnknownEpisode,
		fmt.Sprintf("unknown episode_id %q (never issued, already done, closed or expired)", id))
}

func (s *Server) step(w http.ResponseWriter, r *http.Request) {
	var req StepRequest
	if !s.decode(w, r, &req) {
		return
	}
	if req.EpisodeID == "" {
		s.fail(w, r, http.StatusBadRequest, CodeBadRequest, "episode_id is required")
		return
	}
	ep := s.lookup(req.EpisodeID)
	if ep == nil {
		s.unknownEpisode(w, r, req.EpisodeID)
		return
	}
	ep.mu.Lock()
	obs, reward, done, err := ep.env.Step(req.Action)
	ep.mu.Unlock()
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, CodeEnvError, err.Error())
		return
	}
	if done {
		s.mu.Lock()
		delete(s.episodes, req.EpisodeID)
		s.mu.Unlock()
	}
	if math.IsNaN(reward) || math.IsInf(reward, 0) {
		s.fail(w, r, http.StatusInternalServerError, CodeInternal, fmt.Sprintf("task %s returned reward %v", s.task.Name(), reward))
		return
	}
	writeJSON(w, http.StatusOK, StepResponse{Observation: obs, Reward: reward, Done: done})
}

func (s *Server) close(w http.ResponseWriter, r *http.Request) {
	var req CloseRequest
	if !s.decode(w, r, &req) {
		return
	}
	s.mu.Lock()
	_, ok := s.episodes[req.EpisodeID]
	delete(s.episodes, req.EpisodeID)
	s.mu.Unlock()
	if !ok {
		s.unknownEpisode(w, r, req.EpisodeID)
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

// decode reads a JSON body strictly: unknown fields are errors, so a client
// that misspells "action" hears about it instead of sending empty actions.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			s.fail(w, r, http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("body over %d bytes", s.cfg.MaxBodyBytes))
		} else {
			s.fail(w, r, http.StatusBadRequest, CodeBadRequest, "bad JSON body: "+err.Error())
		}
		return false
	}
	if dec.More() {
		s.fail(w, r, http.StatusBadRequest, CodeBadRequest, "bad JSON body: more than one value")
		return false
	}
	return true
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	s.cfg.Logger.Debug().Str("path", r.URL.Path).Int("status", status).Str("code", code).Msg(msg)
	writeJSON(w, status, ErrorResponse{Error: msg, Code: code})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client is gone if this fails; nothing to do
}

// DefaultAddr is where Listen binds when given "": loopback only, a free
// port. Serving beyond the machine is an explicit choice.
const DefaultAddr = "127.0.0.1:0"

// Listen opens a TCP listener on addr ("" means DefaultAddr).
func Listen(addr string) (net.Listener, error) {
	if addr == "" {
		addr = DefaultAddr
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("httpenv: listen %s: %w", addr, err)
	}
	return ln, nil
}

// Serve serves s on ln until ctx is cancelled, then shuts down gracefully
// (in-flight requests get up to 5 s) and returns nil.
func Serve(ctx context.Context, ln net.Listener, s *Server) error {
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("httpenv: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := hs.Shutdown(sctx)
	<-errc // http.ErrServerClosed
	if err != nil {
		return fmt.Errorf("httpenv: shutdown: %w", err)
	}
	return nil
}
