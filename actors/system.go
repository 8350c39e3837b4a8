package actors

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// SystemConfig configures a System: the local actor runtime of one process.
type SystemConfig struct {
	// Logger receives every shell's log lines (each shell adds its actor,
	// role and run_id fields) and protoactor's own lines at LibLogLevel and
	// above. Default: zerolog.Nop().
	Logger zerolog.Logger
	// LibLogLevel is the lowest level of protoactor's internal log lines that
	// is forwarded to Logger; protoactor logs every restart and dead letter
	// at Info, which is noise next to the shells' own lines. The zero value
	// (zerolog.DebugLevel) means Warn; TraceLevel forwards everything.
	LibLogLevel zerolog.Level
	// Registerer receives the shells' metrics (asyncrl_actor_*). nil keeps
	// them unregistered.
	Registerer prometheus.Registerer
	// Clock drives Step/Tick times, core timers and supervised restarts.
	// Default: RealClock.
	Clock Clock
	// RunID is attached to every shell's log lines unless the shell sets its own.
	RunID string
	// OnEscalate is called, on its own goroutine, when a shell without its
	// own OnEscalate fails too often and is stopped. It may call Shutdown.
	// nil only logs.
	OnEscalate func(name string, err error)
}

// DefaultSystemConfig returns a quiet configuration on the wall clock.
func DefaultSystemConfig() SystemConfig {
	return SystemConfig{Logger: zerolog.Nop(), LibLogLevel: zerolog.WarnLevel, Clock: RealClock{}}
}

// System owns a protoactor ActorSystem, the supervision strategy of every
// shell spawned on it, and their shared metrics.
type System struct {
	cfg      SystemConfig
	as       *actor.ActorSystem
	metrics  *shellMetrics
	strategy *supervisor

	mu     sync.Mutex
	shells map[string]stopper
	closed bool
}

// stopper is the non-generic face of a Shell that the System keeps.
type stopper interface {
	Stop(ctx context.Context) error
}

// NewSystem starts an actor system. Call Shutdown to stop it.
func NewSystem(cfg SystemConfig) (*System, error) {
	if cfg.Clock == nil {
		cfg.Clock = RealClock{}
	}
	if cfg.LibLogLevel == zerolog.DebugLevel {
		cfg.LibLogLevel = zerolog.WarnLevel
	}
	m, err := newShellMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	s := &System{cfg: cfg, metrics: m, shells: map[string]stopper{}}
	s.strategy = newSupervisor(s)
	log := cfg.Logger.With().Str("lib", "protoactor").Logger()
	s.as = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(&zerologHandler{log: log, min: cfg.LibLogLevel})
	}))
	return s, nil
}

// Clock returns the system's clock.
func (s *System) Clock() Clock { return s.cfg.Clock }

// ActorSystem exposes the protoactor runtime for code that needs it (e.g. to
// spawn plain actors next to the shells).
func (s *System) ActorSystem() *actor.ActorSystem { return s.as }

func (s *System) register(name string, sh stopper) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("spawn %q: %w", name, ErrStopped)
	}
	if _, dup := s.shells[name]; dup {
		return fmt.Errorf("%w: Name %q is already in use", ErrInvalidConfig, name)
	}
	s.shells[name] = sh
	return nil
}

func (s *System) unregister(name string, sh stopper) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shells[name] == sh {
		delete(s.shells, name)
	}
}

// Shutdown stops every shell (each drains what it already accepted) and the
// actor system. It returns the first error, e.g. ctx ending before a shell
// finished draining. It is safe to call more than once.
func (s *System) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	shells := make([]stopper, 0, len(s.shells))
	for _, sh := range s.shells {
		shells = append(shells, sh)
	}
	s.mu.Unlock()
	var first error
	for _, sh := range shells {
		if err := sh.Stop(ctx); err != nil && first == nil {
			first = err
		}
	}
	s.as.Shutdown()
	return first
}

// zerologHandler forwards protoactor's slog lines to zerolog.
type zerologHandler struct {
	log   zerolog.Logger
	min   zerolog.Level
	attrs []slog.Attr
	group string
}

var _ slog.Handler = (*zerologHandler)(nil)

func slogToZerolog(l slog.Level) zerolog.Level {
	switch {
	case l >= slog.LevelError:
		return zerolog.ErrorLevel
	case l >= slog.LevelWarn:
		return zerolog.WarnLevel
	case l >= slog.LevelInfo:
		return zerolog.InfoLevel
	default:
		return zerolog.DebugLevel
	}
}

func (h *zerologHandler) Enabled(_ context.Context, l slog.Level) bool {
	return slogToZerolog(l) >= h.min
}

func (h *zerologHandler) Handle(_ context.Context, r slog.Record) error {
	ev := h.log.WithLevel(slogToZerolog(r.Level))
	// h.attrs already carry the group prefix in force when they were added.
	for _, a := range h.attrs {
		ev = ev.Str(a.Key, a.Value.String())
	}
	r.Attrs(func(a slog.Attr) bool {
		ev = ev.Str(h.key(a.Key), a.Value.String())
		return true
	})
	ev.Msg(r.Message)
	return nil
}

func (h *zerologHandler) key(k string) string {
	if h.group == "" {
		return k
	}
	return h.group + "." + k
}

func (h *zerologHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append([]slog.Attr(nil), h.attrs...)
	for _, a := range attrs {
		c.attrs = append(c.attrs, slog.Attr{Key: h.key(a.Key), Value: a.Value})
	}
	return &c
}

func (h *zerologHandler) WithGroup(name string) slog.Handler {
	c := *h
	if c.group != "" {
		name = c.group + "." + name
	}
	c.group = name
	return &c
}
