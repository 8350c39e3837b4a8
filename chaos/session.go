package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asyncrl/asyncrl/cluster/node"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
)

// session is one chaos session's moving parts: the node under test, the
// fleet of attacked engines, the trainer worker and the watcher, and the
// steps seen on the bus. Its cleanups run in reverse order on close.
type session struct {
	cfg      Config
	start    time.Time
	progress io.Writer
	rc       config.Config
	fl       *fleet
	n        *node.Node
	w        *watcher
	// steps is the highest StepDone seen.
	steps atomic.Int64
	// stopWorker stops the trainer worker and the watcher (once); wdone is
	// closed when the watcher returned.
	stopWorker func() error
	wdone      chan struct{}
	cleanups   []func()
}

// onClose registers f to run on close.
func (s *session) onClose(f func()) { s.cleanups = append(s.cleanups, f) }

// close runs the cleanups, the last registered first.
func (s *session) close() {
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
}

// setUp makes the data dir, the fleet and the node (its own engine taken
// out of the router: the fleet's are the ones under attack), follows the
// run's weights and steps, and starts the trainer worker and the watcher.
func (s *session) setUp(ctx context.Context, plantForget bool) error {
	dir := s.cfg.DataDir
	if dir == "" {
		d, err := os.MkdirTemp("", "asyncrl-chaos-*")
		if err != nil {
			return fmt.Errorf("chaos: data dir: %w", err)
		}
		s.onClose(func() { os.RemoveAll(d) })
		dir = d
	}
	s.rc = runConfig(s.cfg, dir)
	if err := s.rc.Validate(); err != nil {
		return fmt.Errorf("%w: run: %w", ErrConfig, err)
	}
	fl, err := newFleet(s.cfg.Engines, s.rc, s.cfg.Logger)
	if err != nil {
		return err
	}
	s.fl = fl
	s.onClose(fl.close)
	fl.plantForget = plantForget
	s.rc.Engines.ExternalURLs = fl.URLs()
	if err := s.startNode(ctx); err != nil {
		return err
	}
	if err := s.follow(); err != nil {
		return err
	}
	s.startWorker()
	return nil
}

// startNode starts the node with JetStream on disk (rc.Bus.JetStreamDir:
// the ledger is read back from the files after the node stopped) and
// points the router at the fleet only.
func (s *session) startNode(ctx context.Context) error {
	n, err := node.New(s.rc, node.Options{Logger: s.cfg.Logger, KeepGroupRecords: true})
	if err != nil {
		return fmt.Errorf("chaos: node: %w", err)
	}
	if err := n.Start(ctx); err != nil {
		return fmt.Errorf("chaos: node: %w", err)
	}
	s.n = n
	s.onClose(n.Stop)
	for _, u := range n.EngineURLs() {
		if err := adminCall(s.fl.httpc, http.MethodDelete, n.RouterURL()+"/admin/replicas?url="+url.QueryEscape(u)); err != nil {
			return err
		}
	}
	return s.fl.setRouter(n.RouterURL())
}

// follow subscribes to the run's weights (the fleet loads each version)
// and steps (s.steps), on the run's plan.
func (s *session) follow() error {
	plan, err := transport.Plan(s.rc.Run.ID)
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	wsub, err := s.n.Bus().Subscribe(plan.Weights, s.fl.onWeights)
	if err != nil {
		return fmt.Errorf("chaos: weights subscription: %w", err)
	}
	s.onClose(func() { _ = wsub.Unsubscribe() })
	ssub, err := s.n.Bus().Subscribe(plan.Steps, func(m *transport.Msg) {
		if sd, err := messages.DecodeAs[messages.StepDone](m.Data); err == nil && sd.RunID == s.rc.Run.ID {
			for cur := s.steps.Load(); sd.Step > cur && !s.steps.CompareAndSwap(cur, sd.Step); cur = s.steps.Load() {
			}
		}
	})
	if err != nil {
		return fmt.Errorf("chaos: steps subscription: %w", err)
	}
	s.onClose(func() { _ = ssub.Unsubscribe() })
	return nil
}

// startWorker starts the remote trainer worker and the router watcher.
func (s *session) startWorker() {
	wctx, wcancel := context.WithCancel(context.Background())
	werr := make(chan error, 1)
	log := s.cfg.Logger
	go func() {
		werr <- node.RunWorker(wctx, s.rc, node.WorkerOptions{NATSURL: s.n.BusURL(), Logger: log.With().Str("role", "worker").Logger()})
	}()
	s.stopWorker = sync.OnceValue(func() error {
		wcancel()
		select {
		case err := <-werr:
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		case <-time.After(15 * time.Second):
			return errors.New("chaos: trainer worker did not stop")
		}
	})
	s.onClose(func() { _ = s.stopWorker() })
	s.w = newWatcher(s.fl, s.n.RouterURL())
	s.wdone = make(chan struct{})
	go func() { defer close(s.wdone); s.w.run(wctx) }()
}

// warmUp waits until the trainer made WarmupSteps steps: faults start then.
func (s *session) warmUp(ctx context.Context) error {
	if s.cfg.WarmupSteps <= 0 {
		return nil
	}
	deadline := time.Now().Add(warmupWithin)
	for int(s.steps.Load()) < s.cfg.WarmupSteps {
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("chaos: warm-up: %d of %d steps within %v: %w", s.steps.Load(), s.cfg.WarmupSteps, warmupWithin, errors.Join(ctx.Err(), errNoWarmup))
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Fprintf(s.progress, "warm-up done after %.3fs (%d steps); faults start\n", time.Since(s.start).Seconds(), s.steps.Load())
	return nil
}

// recover waits, up to RecoverWithin, for one more step than atHeal and
// every engine on the latest version.
func (s *session) recover(ctx context.Context, atHeal int) {
	deadline := time.Now().Add(s.cfg.RecoverWithin)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if int(s.steps.Load()) > atHeal && allAt(s.fl.engineVersions(), s.fl.latest()) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// evidence stops the worker, the watcher and the node, fills rep's summary
// and gathers what the invariants judge: the run's steps and versions, the
// watcher's samples, the fleet's load errors and the durable ledger read
// back from disk against the live one.
func (s *session) evidence(atHeal int, runErr error, rep *Report) (ev Evidence, workerErr, auditErr error) {
	ev = Evidence{StepsAtHeal: atHeal, StepsAtEnd: int(s.steps.Load()), Latest: s.fl.latest(), EngineVersions: s.fl.engineVersions()}
	workerErr = s.stopWorker()
	<-s.wdone
	s.n.Stop()
	rep.Summary = s.n.Summary(true, runErr)
	ev.Summary = rep.Summary
	live := s.n.Ledger().Snapshot()
	ev.VersionDrops, ev.Overclaims, ev.Samples = s.w.results()
	s.fl.mu.Lock()
	ev.LoadErrors = append([]string(nil), s.fl.loadErrs...)
	ev.VersionDrops = append(ev.VersionDrops, s.fl.drops...)
	s.fl.mu.Unlock()

	actx, acancel := context.WithTimeout(context.Background(), 30*time.Second)
	durable, records, auditErr := readDurableLedger(actx, s.rc.Bus.JetStreamDir, s.rc.Run.ID)
	acancel()
	ev.Groups, ev.LedgerRecords = durable, records
	ev.LedgerMismatches = compareLedgers(durable, live)
	return ev, workerErr, auditErr
}
