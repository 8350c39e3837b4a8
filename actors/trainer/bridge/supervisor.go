package bridge

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// ErrRestartsExhausted: a step (or the start) failed more times in a row
// than Options.Restarts allows.
var ErrRestartsExhausted = errors.New("bridge: trainer child restarts exhausted")

// Options configures a Supervisor.
type Options struct {
	Spec Spec
	// Init is the Init frame's content (model, optimizer, loss, seed,
	// out_dir; Resume and Step say where the first child starts). Each
	// restart sends it again with the last completed step's state.
	Init Init
	// StepTimeout is the per-TrainBatch deadline (trainer.exec_step_timeout;
	// default 10 min).
	StepTimeout time.Duration
	// InitTimeout bounds Init, SaveCheckpoint and Shutdown (default
	// StepTimeout: loading a large model takes a while).
	InitTimeout time.Duration
	// Restarts is how many times in a row a failed child is replaced
	// before the step fails with ErrRestartsExhausted
	// (trainer.exec_restarts; a successful step resets the count).
	Restarts int
	// Backoff is the wait before the first restart (default 1 s); it
	// doubles per consecutive failure up to MaxBackoff (default 30 s).
	Backoff, MaxBackoff time.Duration
	// Logger receives restarts and the child's stderr.
	Logger zerolog.Logger
	// OnSent, if set, is called after a frame of type typ has been
	// written to the child (pid), before its reply is awaited (on the
	// calling goroutine for one child, on the rank's for a group): tests
	// kill the child there to fail a step mid-TrainBatch.
	OnSent func(typ string, pid int)
	// Ranks is the size of the data-parallel group (trainer.exec_ranks):
	// above 1, that many children of Spec form one torch.distributed
	// group (Init.group, group.go); 0 or 1 is one child.
	Ranks int
	// Rendezvous bounds the group's rendezvous (trainer.exec_rendezvous_timeout;
	// default 2 min): a rank that has not joined by then fails the start.
	Rendezvous time.Duration
	// Nodes spreads the group over that many nodes, Ranks on each
	// (trainer.exec_nodes; 0 or 1: this node only): ranks 0…Ranks-1 run
	// here, the rest through Remote, which a group of several nodes needs.
	Nodes  int
	Remote RemoteRanks
	// RendezvousAddr is where rank 0 hosts the group's TCP store, an
	// address of this machine the other nodes' ranks reach ("" =
	// 127.0.0.1, enough when every rank runs here).
	RendezvousAddr string
}

func (o *Options) defaults() {
	if o.StepTimeout <= 0 {
		o.StepTimeout = 10 * time.Minute
	}
	if o.InitTimeout <= 0 {
		o.InitTimeout = o.StepTimeout
	}
	if o.Backoff <= 0 {
		o.Backoff = time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 30 * time.Second
	}
	o.Restarts = max(o.Restarts, 0)
	if o.Rendezvous <= 0 {
		o.Rendezvous = 2 * time.Minute
	}
}

// Supervisor keeps one child alive and trains steps through it exactly
// once each: a child that exits or misses a deadline is killed and
// replaced by one that resumes from the last completed step's state, and
// the step is sent again. It is not safe for concurrent use.
type Supervisor struct {
	opts  Options
	child *Child
	// peers are ranks 1… of a group (child is rank 0, always on this
	// node: it hosts the rendezvous); empty for one child.
	peers []member
	step  int64  // the last completed step (the version the weights are at)
	state string // its state directory ("" before the first step: Init.Resume)
	// ownState: state is a directory a child wrote for a step (not
	// Init.Resume, which belongs to the caller): once a newer step
	// completes nothing reads it again, and it is deleted — a child's
	// state (float32 weights and the optimiser's moments, ~12 bytes a
	// parameter) per step would otherwise fill the disk in a long run.
	ownState bool
	ready    Reply
	// started counts children started (1 + restarts).
	started atomic.Int64
}

// Start starts the first child and initialises it; a child that dies or
// hangs during Init is replaced like during a step.
func Start(ctx context.Context, opts Options) (*Supervisor, error) {
	opts.defaults()
	if len(opts.Spec.Argv) == 0 {
		return nil, fmt.Errorf("bridge: no command (trainer.exec)")
	}
	s := &Supervisor{opts: opts, step: opts.Init.Step}
	if opts.Init.Resume != nil {
		s.state = *opts.Init.Resume
	}
	if err := s.ensure(ctx, "start"); err != nil {
		return nil, err
	}
	return s, nil
}

// Step is the last completed step: the version the child's weights are at.
func (s *Supervisor) Step() int64 { return s.step }

// Started is how many children were started (1 + restarts). Unlike the
// rest of Supervisor it is safe to call concurrently (metrics scrapes).
func (s *Supervisor) Started() int { return int(s.started.Load()) }

// State is the resume state of the last completed step (Init.Resume
// before the first).
func (s *Supervisor) State() string { return s.state }

// Ranks is the group's size (1: one child).
func (s *Supervisor) Ranks() int { return s.world() }

// Worker is the running child's Ready.worker (name, protocol, torch…).
func (s *Supervisor) Worker() map[string]any { return s.ready.Worker }

// ensure makes sure a child runs and is initialised, restarting up to
// Restarts times; what is the operation for the error message.
func (s *Supervisor) ensure(ctx context.Context, what string) error {
	var last error
	for failures := 0; ; failures++ {
		if s.child != nil {
			return nil
		}
		if failures > 0 {
			if failures > s.opts.Restarts {
				return fmt.Errorf("%w: %s failed %d times in a row (trainer.exec_restarts %d); last: %w",
					ErrRestartsExhausted, what, failures, s.opts.Restarts, last)
			}
			if err := s.backoff(ctx, failures); err != nil {
				return err
			}
		}
		err := s.spawn(ctx)
		if err == nil {
			return nil
		}
		var ce *ChildError
		if errors.As(err, &ce) || ctx.Err() != nil || (s.started.Load() == 1 && errors.Is(err, errStart)) {
			// The child refused its Init (a configuration problem a restart
			// would repeat), or the command cannot be started at all.
			return err
		}
		last = err
	}
}

var errStart = errors.New("bridge: cannot start the trainer child")

func (s *Supervisor) spawn(ctx context.Context) error {
	s.started.Add(1)
	init := s.opts.Init
	init.Step = s.step
	init.Resume = nil
	if s.state != "" {
		st := s.state
		init.Resume = &st
	}
	cs, reqs, err := s.startRanks(ctx, init)
	if err != nil {
		return fmt.Errorf("%w: %w", errStart, err)
	}
	for _, m := range cs {
		if c, ok := m.(*Child); ok {
			c.sent = s.opts.OnSent
		}
	}
	res := callAll(ctx, cs, TypeInit, reqs, TypeReady, s.opts.InitTimeout)
	_, err = groupError(ctx, res)
	for r, x := range res {
		if err == nil && x.rep.Step != s.step {
			err = rankErr(r, len(cs), fmt.Errorf("%w: Ready at step %d after Init at step %d", ErrProtocol, x.rep.Step, s.step))
		}
	}
	if err != nil {
		killAll(cs)
		return fmt.Errorf("bridge: init %s (step %d): %w%s", s.opts.Spec, s.step, err, unanswered(ctx, res))
	}
	s.child, s.peers, s.ready = cs[0].(*Child), cs[1:], res[0].rep
	for r, c := range cs {
		s.opts.Logger.Info().Int("rank", r).Stringer("child", c).Int64("step", s.step).Str("resume", s.state).Int("ranks", len(cs)).
			Interface("worker", res[0].rep.Worker).Msg("trainer child ready")
	}
	return nil
}

func (s *Supervisor) backoff(ctx context.Context, failures int) error {
	d := s.opts.Backoff
	for i := 1; i < failures && d < s.opts.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, s.opts.MaxBackoff)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Supervisor) drop() {
	killAll(s.children())
	s.child, s.peers = nil, nil
}

// Train trains tb (its Step must be Step()+1). A child that exits, misses
// StepTimeout or breaks the protocol is killed and replaced (resumed from
// the last completed step's state) and tb is sent again, up to Restarts
// times in a row; then ErrRestartsExhausted. A *ChildError (the child
// refused the batch; nothing applied) is returned as it is, the child
// keeps serving.
func (s *Supervisor) Train(ctx context.Context, tb *TrainBatch) (StepResult, error) {
	if tb.Step != s.step+1 {
		return StepResult{}, fmt.Errorf("bridge: TrainBatch for step %d but the child is at step %d", tb.Step, s.step)
	}
	var last error
	for failures := 0; ; failures++ {
		if failures > 0 {
			if failures > s.opts.Restarts {
				return StepResult{}, fmt.Errorf("%w: step %d failed %d times in a row (trainer.exec_restarts %d); last: %w",
					ErrRestartsExhausted, tb.Step, failures, s.opts.Restarts, last)
			}
			s.opts.Logger.Warn().Err(last).Int64("step", tb.Step).Int("failures", failures).
				Str("resume", s.state).Msg("trainer child failed; restarting it from the last completed step")
			if err := s.backoff(ctx, failures); err != nil {
				return StepResult{}, err
			}
		}
		if s.child == nil {
			if err := s.spawn(ctx); err != nil {
				var ce *ChildError
				if errors.As(err, &ce) || ctx.Err() != nil {
					return StepResult{}, err
				}
				last = err
				continue
			}
		}
		res, refused, err := s.trainAll(ctx, tb)
		if err == nil {
			if s.ownState && s.state != res.State {
				if err := os.RemoveAll(s.state); err != nil {
					s.opts.Logger.Warn().Err(err).Str("dir", s.state).Msg("trainer child: removing a superseded state directory")
				}
			}
			s.step, s.state, s.ownState = res.Step, res.State, true
			return res, nil
		}
		if refused {
			return StepResult{}, fmt.Errorf("bridge: step %d: %w", tb.Step, err)
		}
		s.drop()
		if ctx.Err() != nil {
			return StepResult{}, ctx.Err()
		}
		last = err
	}
}

// trainAll sends tb to every rank and reads rank 0's StepResult with
// every rank's figures. refused: every rank refused tb (*ChildError),
// nothing applied and the children keep serving.
func (s *Supervisor) trainAll(ctx context.Context, tb *TrainBatch) (StepResult, bool, error) {
	cs := s.children()
	reqs := make([]frame, len(cs))
	for r := range cs {
		t := *tb // each rank's own header (ids)
		reqs[r] = &t
	}
	out := callAll(ctx, cs, TypeTrainBatch, reqs, TypeStepResult, s.opts.StepTimeout)
	if refused, err := groupError(ctx, out); err != nil {
		return StepResult{}, refused, err
	}
	for r, x := range out {
		if x.rep.Step != tb.Step {
			return StepResult{}, false, rankErr(r, len(cs), fmt.Errorf("%w: StepResult for step %d, sent step %d", ErrProtocol, x.rep.Step, tb.Step))
		}
	}
	res, err := stepResult(out[0].rep)
	if err != nil {
		return StepResult{}, false, err
	}
	res.Ranks = rankFigures(out)
	return res, false, nil
}

// SaveCheckpoint asks the child (every rank of a group) for its full
// state in dir.
func (s *Supervisor) SaveCheckpoint(ctx context.Context, dir string) (Reply, error) {
	if err := s.ensure(ctx, "save checkpoint"); err != nil {
		return Reply{}, err
	}
	cs := s.children()
	reqs := make([]frame, len(cs))
	for r := range cs {
		reqs[r] = &SaveCheckpoint{Dir: dir}
	}
	out := callAll(ctx, cs, TypeSaveCheckpoint, reqs, TypeSaved, s.opts.InitTimeout)
	refused, err := groupError(ctx, out)
	if err != nil && !refused {
		s.drop()
	}
	return out[0].rep, err
}

// Close shuts the child down (Shutdown → Bye → exit), killing it if it
// does not exit in time.
func (s *Supervisor) Close(ctx context.Context) error {
	if s.child == nil {
		return nil
	}
	cs := s.children()
	s.child, s.peers = nil, nil
	timeout := min(s.opts.InitTimeout, 30*time.Second)
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Shutdown(ctx, timeout); err != nil {
				errs[r] = rankErr(r, len(cs), err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
