package actors

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
)

// Sender carries out a core's Send effects (BusSender publishes on a
// transport.Bus). It is called on the actor's goroutine, one send at a time;
// a slow Sender slows that actor only.
type Sender[Out any] interface {
	Send(ctx context.Context, subject string, msg Out) error
}

// SenderFunc adapts a function to Sender.
type SenderFunc[Out any] func(ctx context.Context, subject string, msg Out) error

// Send calls f.
func (f SenderFunc[Out]) Send(ctx context.Context, subject string, msg Out) error {
	return f(ctx, subject, msg)
}

// ShellConfig configures one shell.
type ShellConfig struct {
	// Name is the actor's unique name within the System (required); it is
	// the "actor" label of the shell's metrics and log lines.
	Name string
	// Role is logged as "role" (e.g. "router", "filter").
	Role string
	// RunID is logged as "run_id"; empty uses the System's.
	RunID string
	// MailboxCapacity bounds the messages accepted by Tell (and bridges) and
	// not yet started by the core; 0 means unbounded. When full, Tell
	// returns ErrMailboxFull and asyncrl_actor_mailbox_dropped_total counts
	// the refusal; a subject bridge waits for room instead (counted in
	// asyncrl_actor_mailbox_waits_total). Timer ticks are not counted.
	// Default 1024.
	MailboxCapacity int
	// Supervision is the restart policy when the core panics.
	Supervision SupervisionConfig
	// OnEscalate overrides SystemConfig.OnEscalate for this shell.
	OnEscalate func(name string, err error)
	// Metrics applies the core's Metric effects; nil drops them (logged,
	// rate-limited).
	Metrics MetricSink
	// LogInterval rate-limits repeated warnings (and Log effects with a
	// RateKey): at most one per key per interval. Default 10s.
	LogInterval time.Duration
}

// DefaultShellConfig returns the documented defaults for name and role.
func DefaultShellConfig(name, role string) ShellConfig {
	return ShellConfig{
		Name:            name,
		Role:            role,
		MailboxCapacity: 1024,
		Supervision:     DefaultSupervisionConfig(),
		LogInterval:     10 * time.Second,
	}
}

// Validate names the first invalid field.
func (c ShellConfig) Validate() error {
	if c.Name == "" {
		return fmt.Errorf("%w: Name must not be empty", ErrInvalidConfig)
	}
	if c.MailboxCapacity < 0 {
		return fmt.Errorf("%w: MailboxCapacity must be >= 0 (0 = unbounded), got %d", ErrInvalidConfig, c.MailboxCapacity)
	}
	if c.LogInterval < 0 {
		return fmt.Errorf("%w: LogInterval must be >= 0, got %v", ErrInvalidConfig, c.LogInterval)
	}
	return c.Supervision.Validate()
}

const (
	stateRunning int32 = iota
	stateStopping
	stateStopped
)

// Shell is a running actor that owns a Core. Its methods are safe for
// concurrent use.
type Shell[In, Out any] struct {
	sys     *System
	cfg     ShellConfig
	factory func() Core[In, Out]
	sender  Sender[Out]
	pid     *actor.PID
	log     zerolog.Logger
	limited *LimitedLogger

	queued atomic.Int64
	state  atomic.Int32
	// admit is held shared while a message is checked and enqueued, and
	// exclusively while Stop flips state, so every message Tell accepted is
	// in the mailbox before the poison pill that ends the drain.
	admit        sync.RWMutex
	timerGen     atomic.Uint64
	incarnations atomic.Int64
	restarts     atomic.Int64

	// ctx is handed to the Sender; it ends when the actor has stopped.
	ctx    context.Context
	cancel context.CancelFunc

	done     chan struct{}
	doneOnce sync.Once

	bmu     sync.Mutex
	bridges []*Bridge

	// Bridge handlers waiting for mailbox room (tellWait): waiters counts
	// them, so the actor signals only when someone waits; room is closed
	// (and replaced) when the core takes a message while they wait.
	waiters  atomic.Int32
	roomMu   sync.Mutex
	room     chan struct{}
	stopping chan struct{} // closed once Stop began or the actor stopped
	stopOnce sync.Once
}

var _ stopper = (*Shell[int, int])(nil)

// delivery is a user message on its way to the core.
type delivery[In any] struct {
	msg In
	// counted: it holds one unit of MailboxCapacity.
	counted bool
	// done, if set, runs after the core stepped it without panicking
	// (a durable bridge acks there).
	done func()
}

// tick is a fired core timer; gen tells a stale arming from the current one.
type tick struct {
	name string
	gen  uint64
}

// Spawn starts an actor named cfg.Name that owns a core built by factory
// (and rebuilt by it after every supervised restart) and carries out its
// Send effects through sender (nil: sends are logged as ErrNoSender).
func Spawn[In, Out any](sys *System, cfg ShellConfig, factory func() Core[In, Out], sender Sender[Out]) (*Shell[In, Out], error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if factory == nil {
		return nil, fmt.Errorf("%w: factory must not be nil", ErrInvalidConfig)
	}
	if cfg.RunID == "" {
		cfg.RunID = sys.cfg.RunID
	}
	if cfg.Supervision.Rand == nil {
		seed := uint64(time.Now().UnixNano())
		cfg.Supervision.Rand = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	}
	log := sys.cfg.Logger.With().Str("actor", cfg.Name).Str("role", cfg.Role).Str("run_id", cfg.RunID).Logger()
	sh := &Shell[In, Out]{
		sys:      sys,
		cfg:      cfg,
		factory:  factory,
		sender:   sender,
		log:      log,
		limited:  NewLimitedLogger(log, sys.cfg.Clock, cfg.LogInterval),
		done:     make(chan struct{}),
		room:     make(chan struct{}),
		stopping: make(chan struct{}),
	}
	sh.ctx, sh.cancel = context.WithCancel(context.Background())
	if err := sys.register(cfg.Name, sh); err != nil {
		sh.cancel()
		return nil, err
	}
	sys.strategy.add(cfg.Name, &supervised{
		name:       cfg.Name,
		log:        log,
		cfg:        cfg.Supervision,
		onEscalate: cfg.OnEscalate,
		onRestart: func(delay time.Duration, err error) {
			sh.restarts.Add(1)
			sys.metrics.restarts.WithLabelValues(cfg.Name).Inc()
			log.Warn().Err(err).Dur("backoff", delay).Msg("core failed; restarting after backoff")
		},
	})
	props := actor.PropsFromProducer(func() actor.Actor { return &shellActor[In, Out]{sh: sh} },
		actor.WithGuardian(sys.strategy))
	spawnHook()
	pid, err := sys.as.Root.SpawnNamed(props, cfg.Name)
	if err != nil {
		sh.finish() // also releases a Shutdown already waiting on Done
		return nil, fmt.Errorf("actors: spawn %q: %w", cfg.Name, err)
	}
	// Shutdown may have stopped the shell after register and before its
	// actor existed; Stop then left the actor to us.
	sh.admit.Lock()
	sh.pid = pid
	stopped := sh.state.Load() != stateRunning
	sh.admit.Unlock()
	if stopped {
		sys.strategy.forget(cfg.Name)
		sys.as.Root.Stop(pid)
		return nil, fmt.Errorf("spawn %q: %w", cfg.Name, ErrStopped)
	}
	return sh, nil
}

// spawnHook runs between a shell's registration and the spawn of its actor;
// tests use it to stop the System inside that window.
var spawnHook = func() {}

// Name is the actor's name.
func (sh *Shell[In, Out]) Name() string { return sh.cfg.Name }

// PID is the protoactor process id, for code that talks to it directly.
func (sh *Shell[In, Out]) PID() *actor.PID { return sh.pid }

// Done is closed once the actor has stopped: after Stop, or after an
// escalation or Stop directive.
func (sh *Shell[In, Out]) Done() <-chan struct{} { return sh.done }

// Queued is the number of accepted messages the core has not started yet.
func (sh *Shell[In, Out]) Queued() int { return int(sh.queued.Load()) }

// Incarnations counts the cores the factory has built (1 + restarts done).
func (sh *Shell[In, Out]) Incarnations() int { return int(sh.incarnations.Load()) }

// Restarts counts the restarts scheduled after a failure.
func (sh *Shell[In, Out]) Restarts() int { return int(sh.restarts.Load()) }

// Tell enqueues msg for the core without waiting. It returns ErrMailboxFull
// (nothing enqueued, the drop counted) when MailboxCapacity messages are
// already waiting, and ErrStopped once Stop began.
func (sh *Shell[In, Out]) Tell(msg In) error {
	return sh.deliver(msg, nil)
}

func (sh *Shell[In, Out]) deliver(msg In, done func()) error {
	err := sh.offer(msg, done, false)
	if err == ErrMailboxFull {
		c := sh.cfg.MailboxCapacity
		sh.sys.metrics.dropped.WithLabelValues(sh.cfg.Name).Inc()
		sh.limited.Warn("mailbox-full").Int("capacity", c).Msg("mailbox full; message refused")
		return fmt.Errorf("tell %q: %w (capacity %d)", sh.cfg.Name, ErrMailboxFull, c)
	}
	return err
}

// offer enqueues msg unless the shell stopped (ErrStopped, wrapped) or,
// without over, the mailbox is full (the bare ErrMailboxFull, uncounted:
// callers wrap or count it). over admits past
// MailboxCapacity; the message still holds a unit of it until stepped.
func (sh *Shell[In, Out]) offer(msg In, done func(), over bool) error {
	sh.admit.RLock()
	defer sh.admit.RUnlock()
	if sh.state.Load() != stateRunning {
		return fmt.Errorf("tell %q: %w", sh.cfg.Name, ErrStopped)
	}
	d := &delivery[In]{msg: msg, done: done}
	if c := sh.cfg.MailboxCapacity; c > 0 {
		if sh.queued.Add(1) > int64(c) && !over {
			sh.queued.Add(-1)
			return ErrMailboxFull
		}
		d.counted = true
	}
	sh.sys.as.Root.Send(sh.pid, d)
	return nil
}

// tellWait is a subject bridge's Tell: when the mailbox is full it waits
// until the core takes a message, the shell stops (ErrStopped) or stop is
// closed (ErrBridgeStopped), so overload slows admission instead of losing
// messages. The bus buffers what arrives meanwhile (natsbus: up to the
// subscription's pending limits). inline (transport.Msg.Inline) means the
// handler runs inside the publisher's Publish, possibly on this shell's own
// actor goroutine: waiting could never end, so the message is admitted over
// the bound instead (asyncrl_actor_mailbox_overflow_total).
func (sh *Shell[In, Out]) tellWait(msg In, subject string, stop <-chan struct{}, inline bool) error {
	err := sh.offer(msg, nil, false)
	if err != ErrMailboxFull {
		return err
	}
	name, c := sh.cfg.Name, sh.cfg.MailboxCapacity
	if inline {
		sh.sys.metrics.overflow.WithLabelValues(name).Inc()
		sh.limited.Warn("mailbox-overflow:"+subject).Int("capacity", c).Str("subject", subject).
			Msg("mailbox full and the bus delivers on the publisher's goroutine; admitted over capacity")
		return sh.offer(msg, nil, true)
	}
	sh.sys.metrics.waits.WithLabelValues(name).Inc()
	sh.limited.Warn("mailbox-wait:"+subject).Int("capacity", c).Str("subject", subject).
		Msg("mailbox full; bridge waits for room (admission slows)")
	start := time.Now()
	sh.waiters.Add(1)
	defer func() {
		sh.waiters.Add(-1)
		sh.sys.metrics.waitSeconds.WithLabelValues(name).Add(time.Since(start).Seconds())
	}()
	for {
		// Take the room channel before retrying: a message the core takes
		// after the retry closes this very channel.
		sh.roomMu.Lock()
		room := sh.room
		sh.roomMu.Unlock()
		if err := sh.offer(msg, nil, false); err != ErrMailboxFull {
			return err
		}
		select {
		case <-room:
		case <-sh.stopping:
			return fmt.Errorf("tell %q: %w", name, ErrStopped)
		case <-stop:
			return fmt.Errorf("bridge %q to %q: %w", subject, name, ErrBridgeStopped)
		}
	}
}

// tookOne runs on the actor after it released a unit of capacity: it wakes
// the bridges waiting for room, if any (one atomic load otherwise).
func (sh *Shell[In, Out]) tookOne() {
	if sh.waiters.Load() == 0 {
		return
	}
	sh.roomMu.Lock()
	close(sh.room)
	sh.room = make(chan struct{})
	sh.roomMu.Unlock()
}

// markStopping releases the bridges waiting for room.
func (sh *Shell[In, Out]) markStopping() {
	sh.stopOnce.Do(func() { close(sh.stopping) })
}

// Stop stops the actor gracefully: bridges unsubscribe first, Tell starts
// refusing, the messages already accepted are stepped (unless the actor is
// waiting out a restart backoff, in which case they are discarded), then the
// actor stops. It waits for that or for ctx. Safe to call more than once.
func (sh *Shell[In, Out]) Stop(ctx context.Context) error {
	sh.admit.Lock()
	first := sh.state.CompareAndSwap(stateRunning, stateStopping)
	pid := sh.pid
	sh.admit.Unlock()
	if first {
		sh.markStopping()
		sh.stopBridges()
		switch {
		case pid == nil:
			// Spawn has registered the shell but not yet started its actor:
			// it sees the stop and stops the actor itself.
		case sh.sys.strategy.forget(sh.cfg.Name):
			sh.sys.as.Root.Stop(pid)
		default:
			sh.sys.as.Root.Poison(pid)
		}
	}
	select {
	case <-sh.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop %q: %w", sh.cfg.Name, ctx.Err())
	}
}

// finish runs once the actor has stopped, whatever stopped it.
func (sh *Shell[In, Out]) finish() {
	sh.doneOnce.Do(func() {
		sh.state.Store(stateStopped)
		sh.markStopping()
		sh.sys.strategy.forget(sh.cfg.Name)
		sh.stopBridges()
		sh.cancel()
		sh.sys.unregister(sh.cfg.Name, sh)
		close(sh.done)
	})
}

func (sh *Shell[In, Out]) addBridge(b *Bridge) error {
	sh.bmu.Lock()
	defer sh.bmu.Unlock()
	if sh.state.Load() != stateRunning {
		return fmt.Errorf("bridge to %q: %w", sh.cfg.Name, ErrStopped)
	}
	sh.bridges = append(sh.bridges, b)
	return nil
}

func (sh *Shell[In, Out]) stopBridges() {
	sh.bmu.Lock()
	bs := sh.bridges
	sh.bridges = nil
	sh.bmu.Unlock()
	for _, b := range bs {
		_ = b.Stop()
	}
}

// sendTick posts a fired timer to the actor. It takes the actor's own pid
// (ctx.Self) rather than sh.pid: a timer armed in Start may fire before
// Spawn has stored the pid.
func (sh *Shell[In, Out]) sendTick(self *actor.PID, name string, gen uint64) {
	if sh.state.Load() != stateRunning {
		return
	}
	sh.sys.as.Root.Send(self, &tick{name: name, gen: gen})
}

// shellActor is one incarnation: protoactor builds a fresh one (and so a
// fresh core) on every restart.
type shellActor[In, Out any] struct {
	sh     *Shell[In, Out]
	self   *actor.PID // where timer ticks go
	core   Core[In, Out]
	timers map[string]timerSlot
}

type timerSlot struct {
	gen  uint64
	stop func() bool
}

func (a *shellActor[In, Out]) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *delivery[In]:
		if m.counted {
			// Released before stepping, so a message that panics the core
			// does not hold capacity forever.
			a.sh.queued.Add(-1)
			a.sh.tookOne()
		}
		a.run(func(now time.Time) { a.core.Step(now, m.msg) })
		if m.done != nil {
			m.done()
		}
	case *tick:
		slot, ok := a.timers[m.name]
		if !ok || slot.gen != m.gen {
			return // cancelled or re-armed after this one fired
		}
		delete(a.timers, m.name)
		a.run(func(now time.Time) { a.core.Tick(now, m.name) })
	case *actor.Started:
		a.self = ctx.Self()
		a.timers = map[string]timerSlot{}
		a.run(func(now time.Time) {
			a.core = a.sh.factory()
			a.sh.incarnations.Add(1)
			if s, ok := a.core.(Starter); ok {
				s.Start(now)
			}
		})
	case *actor.Restarting, *actor.Stopping:
		a.stopTimers()
	case *actor.Stopped:
		a.stopTimers()
		a.sh.finish()
	}
}

func (a *shellActor[In, Out]) stopTimers() {
	for name, t := range a.timers {
		t.stop()
		delete(a.timers, name)
	}
}

// run steps the core with the clock's now and carries out its effects. A
// panic is logged with its stack and re-raised for protoactor's supervision.
func (a *shellActor[In, Out]) run(step func(now time.Time)) {
	defer func() {
		if r := recover(); r != nil {
			a.sh.sys.metrics.panics.WithLabelValues(a.sh.cfg.Name).Inc()
			a.sh.log.Error().Err(asError(r)).Str("stack", string(debug.Stack())).Msg("core panicked")
			panic(r)
		}
	}()
	now := a.sh.sys.cfg.Clock.Now()
	step(now)
	if a.core == nil {
		return
	}
	a.apply(now, a.core.Drain())
}

func zlevel(l LogLevel) zerolog.Level {
	switch l {
	case LevelDebug:
		return zerolog.DebugLevel
	case LevelWarn:
		return zerolog.WarnLevel
	case LevelError:
		return zerolog.ErrorLevel
	default:
		return zerolog.InfoLevel
	}
}

func (a *shellActor[In, Out]) apply(now time.Time, eff Effects[Out]) {
	sh := a.sh
	for _, l := range eff.Logs {
		var ev *zerolog.Event
		if l.RateKey != "" {
			ev = sh.limited.Event(zlevel(l.Level), l.RateKey)
		} else {
			ev = sh.log.WithLevel(zlevel(l.Level))
		}
		for _, f := range l.Fields {
			ev = ev.Str(f.Key, f.Value)
		}
		ev.Msg(l.Msg)
	}
	for _, m := range eff.Metrics {
		if sh.cfg.Metrics == nil {
			sh.limited.Warn("metric:nosink").Str("metric", m.Name).Msg("metric effect dropped: shell has no MetricSink")
			continue
		}
		if err := sh.cfg.Metrics.Apply(m); err != nil {
			sh.limited.Warn("metric:" + m.Name).Err(err).Msg("metric effect failed")
		}
	}
	for _, t := range eff.Timers {
		if old, ok := a.timers[t.Name]; ok {
			old.stop()
			delete(a.timers, t.Name)
		}
		if t.Cancel {
			continue
		}
		gen := sh.timerGen.Add(1)
		name := t.Name
		// Record the slot before arming: a due timer may fire at once.
		a.timers[name] = timerSlot{gen: gen, stop: func() bool { return false }}
		self := a.self
		stop := sh.sys.cfg.Clock.AfterFunc(t.At.Sub(now), func() { sh.sendTick(self, name, gen) })
		a.timers[name] = timerSlot{gen: gen, stop: stop}
	}
	for _, s := range eff.Sends {
		var err error
		if sh.sender == nil {
			err = ErrNoSender
		} else {
			err = sh.sender.Send(sh.ctx, s.Subject, s.Msg)
		}
		if err != nil {
			sh.sys.metrics.sendErr.WithLabelValues(sh.cfg.Name).Inc()
			sh.limited.Warn("send:"+s.Subject).Err(err).Str("subject", s.Subject).Msg("send failed")
		}
	}
}
