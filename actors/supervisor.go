package actors

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
)

// Directive is a Decider's verdict on one failure.
type Directive uint8

// Directives.
const (
	// Restart rebuilds the core from its factory after the backoff delay,
	// unless the failure budget (MaxFailures within Window) is spent.
	Restart Directive = iota
	// Stop stops the actor without calling OnEscalate.
	Stop
	// Escalate stops the actor and calls OnEscalate at once.
	Escalate
)

// SupervisionConfig is the one-for-one restart policy of a shell.
type SupervisionConfig struct {
	// InitialBackoff is the delay before the first restart. Default 100ms.
	InitialBackoff time.Duration
	// MaxBackoff caps the delay (after jitter). Default 10s.
	MaxBackoff time.Duration
	// Multiplier grows the delay per failure within Window: the n-th
	// failure waits InitialBackoff·Multiplier^(n-1). Must be >= 1. Default 2.
	Multiplier float64
	// Jitter spreads each delay uniformly over [d·(1-Jitter), d·(1+Jitter)]
	// so restarted peers do not retry in lockstep. In [0, 1]. Default 0.2.
	Jitter float64
	// MaxFailures is the failure budget: the MaxFailures-th failure within
	// Window stops the actor and escalates instead of restarting. Must be
	// >= 1. Default 5.
	MaxFailures int
	// Window is how far back failures count. Default 1m.
	Window time.Duration
	// Rand draws the jitter. nil seeds one from the wall clock; tests pass a
	// seeded one. It may be shared: the System serialises draws.
	Rand *rand.Rand
	// Decider classifies a failure; nil restarts on every failure.
	Decider func(err error) Directive
}

// DefaultSupervisionConfig returns the defaults documented on the fields.
func DefaultSupervisionConfig() SupervisionConfig {
	return SupervisionConfig{
		InitialBackoff: 100 * time.Millisecond,
		MaxBackoff:     10 * time.Second,
		Multiplier:     2,
		Jitter:         0.2,
		MaxFailures:    5,
		Window:         time.Minute,
	}
}

// Validate names the first invalid field.
func (c SupervisionConfig) Validate() error {
	switch {
	case c.InitialBackoff < 0:
		return fmt.Errorf("%w: Supervision.InitialBackoff must be >= 0, got %v", ErrInvalidConfig, c.InitialBackoff)
	case c.MaxBackoff < c.InitialBackoff:
		return fmt.Errorf("%w: Supervision.MaxBackoff must be >= InitialBackoff (%v), got %v", ErrInvalidConfig, c.InitialBackoff, c.MaxBackoff)
	case c.Multiplier < 1 || math.IsNaN(c.Multiplier) || math.IsInf(c.Multiplier, 0):
		return fmt.Errorf("%w: Supervision.Multiplier must be a finite number >= 1, got %v", ErrInvalidConfig, c.Multiplier)
	case c.Jitter < 0 || c.Jitter > 1 || math.IsNaN(c.Jitter):
		return fmt.Errorf("%w: Supervision.Jitter must be in [0, 1], got %v", ErrInvalidConfig, c.Jitter)
	case c.MaxFailures < 1:
		return fmt.Errorf("%w: Supervision.MaxFailures must be >= 1, got %d", ErrInvalidConfig, c.MaxFailures)
	case c.Window <= 0:
		return fmt.Errorf("%w: Supervision.Window must be > 0, got %v", ErrInvalidConfig, c.Window)
	}
	return nil
}

// Backoff is the restart delay after the n-th failure within the window
// (n >= 1), given u drawn uniformly from [0, 1) for the jitter.
func (c SupervisionConfig) Backoff(n int, u float64) time.Duration {
	if n < 1 {
		n = 1
	}
	d := float64(c.InitialBackoff) * math.Pow(c.Multiplier, float64(n-1))
	d *= 1 + c.Jitter*(2*u-1)
	maxD := float64(c.MaxBackoff)
	if d > maxD || math.IsInf(d, 1) || math.IsNaN(d) {
		d = maxD
	}
	if d < 0 {
		d = 0
	}
	return time.Duration(d)
}

// supervised is the supervision state of one shell, kept by the System so
// it survives the shell's restarts.
type supervised struct {
	name       string
	log        zerolog.Logger
	cfg        SupervisionConfig
	onEscalate func(name string, err error)
	onRestart  func(delay time.Duration, err error)
	failures   []time.Time
	// cancelRestart disarms a pending restart; nil when none is pending.
	cancelRestart func() bool
}

// supervisor is the protoactor strategy of every shell: one-for-one, with
// time taken from the System's clock (protoactor's own strategies read the
// wall clock, which a test cannot drive).
type supervisor struct {
	sys *System

	mu       sync.Mutex
	children map[string]*supervised
}

var _ actor.SupervisorStrategy = (*supervisor)(nil)

func newSupervisor(sys *System) *supervisor {
	return &supervisor{sys: sys, children: map[string]*supervised{}}
}

func (s *supervisor) add(id string, st *supervised) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.children[id] = st
}

// forget drops id's state and disarms a pending restart. It reports whether
// a restart was pending (the actor is then suspended and will not drain).
func (s *supervisor) forget(id string) (restartWasPending bool) {
	s.mu.Lock()
	st, ok := s.children[id]
	delete(s.children, id)
	s.mu.Unlock()
	if !ok || st.cancelRestart == nil {
		return false
	}
	return st.cancelRestart()
}

// asError turns a panic value into an error.
func asError(reason any) error {
	if err, ok := reason.(error); ok {
		return err
	}
	return fmt.Errorf("%w: %v", ErrPanic, reason)
}

// HandleFailure decides what happens to a shell whose core panicked. It runs
// on the failing actor's goroutine, with that actor's mailbox suspended.
func (s *supervisor) HandleFailure(_ *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason any, _ any) {
	err := asError(reason)
	now := s.sys.cfg.Clock.Now()

	s.mu.Lock()
	st, ok := s.children[child.Id]
	if !ok {
		// The shell is stopping (it already forgot its state): let it go.
		s.mu.Unlock()
		sup.StopChildren(child)
		return
	}
	directive := Restart
	if st.cfg.Decider != nil {
		directive = st.cfg.Decider(err)
	}
	// Count the failures still inside the window, this one included.
	kept := st.failures[:0]
	for _, t := range st.failures {
		if now.Sub(t) < st.cfg.Window {
			kept = append(kept, t)
		}
	}
	st.failures = append(kept, now)
	n := len(st.failures)
	if directive == Restart && n >= st.cfg.MaxFailures {
		directive = Escalate
		err = fmt.Errorf("%w: %s failed %d times within %v: %w", ErrEscalated, st.name, n, st.cfg.Window, err)
	} else if directive == Escalate {
		err = fmt.Errorf("%w: %s: %w", ErrEscalated, st.name, err)
	}
	var delay time.Duration
	if directive == Restart {
		u := 0.5 // no jitter draw when Jitter is 0: keeps a shared Rand's sequence for others
		if st.cfg.Jitter > 0 {
			u = st.cfg.Rand.Float64()
		}
		delay = st.cfg.Backoff(n, u)
	} else {
		delete(s.children, child.Id)
	}
	s.mu.Unlock()

	switch directive {
	case Restart:
		if st.onRestart != nil {
			st.onRestart(delay, err)
		}
		cancel := s.sys.cfg.Clock.AfterFunc(delay, func() { sup.RestartChildren(child) })
		s.mu.Lock()
		if s.children[child.Id] == st {
			st.cancelRestart = cancel
		}
		s.mu.Unlock()
	case Stop:
		sup.StopChildren(child)
	case Escalate:
		s.sys.metrics.escalated.WithLabelValues(st.name).Inc()
		sup.StopChildren(child)
		hook := st.onEscalate
		if hook == nil {
			hook = s.sys.cfg.OnEscalate
		}
		st.log.Error().Err(err).Msg("actor stopped and failure escalated")
		if hook != nil {
			// Own goroutine: the hook may stop the system, which waits for
			// this very actor to finish stopping.
			go hook(st.name, err)
		}
	}
}
