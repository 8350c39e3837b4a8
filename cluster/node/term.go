package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/asyncrl/asyncrl/cluster/lease"
	"github.com/asyncrl/asyncrl/cluster/ledger"
	"github.com/asyncrl/asyncrl/cluster/placement"
	"github.com/asyncrl/asyncrl/config"
)

// contend runs the trainer lease: while this node holds it (and its side
// has quorum) it runs the training pipeline; when the lease is lost, the
// side loses quorum or the pipeline fails, the pipeline stops, the lease is
// given up and the node goes back to standby.
func (a *Agent) contend(ctx context.Context) {
	for ctx.Err() == nil {
		if a.quorate() {
			a.contendOnce(ctx)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// contendOnce contends for the lease until ctx ends, quorum is lost or
// the pipeline fails.
func (a *Agent) contendOnce(ctx context.Context) {
	role := a.cfg.Run.Run.ID + "-" + placement.Trainer
	lc := lease.DefaultConfig(role, a.cfg.Name)
	lc.Timing, lc.Replicas, lc.Logger = lease.DefaultTiming(a.cfg.LeaseTTL), a.cfg.Replicas, a.log
	var (
		e       *lease.Elector
		err     error
		leading = make(chan lease.Status, 4)
	)
	// The elector outlives ctx until the pipeline stopped: resigning while
	// it still runs would let a standby start a term next to it.
	ectx, ecancel := context.WithCancel(context.Background())
	defer ecancel()
	// Once contendOnce stops reading (ectx cancelled), the elector's last
	// changes are dropped rather than block its Run.
	lc.OnChange = func(st lease.Status) {
		select {
		case leading <- st:
		case <-ectx.Done():
		}
	}
	for {
		if e, err = lease.New(ctx, a.bus.Conn(), lc); err == nil {
			break
		}
		a.log.Warn().Err(err).Msg("trainer lease: open bucket; retrying")
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
	edone := make(chan struct{})
	go func() { defer close(edone); _ = e.Run(ectx) }()
	defer func() { ecancel(); <-edone }()
	var (
		pcancel context.CancelFunc
		pdone   chan struct{}
	)
	stopPipeline := func() {
		if pcancel != nil {
			pcancel()
			<-pdone
			pcancel, pdone = nil, nil
		}
	}
	defer stopPipeline()
	failed := make(chan error, 1)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if pcancel != nil && !a.quorate() {
				a.event("lost quorum: training stops")
				stopPipeline()
				// Give the lease up so the majority side's standby can take
				// over without waiting for it to expire.
				ecancel()
				<-edone
				return
			}
		case st := <-leading:
			if !st.Leader {
				if pcancel != nil {
					a.event("lease %s lost", placement.Trainer)
				}
				stopPipeline()
				continue
			}
			if !a.quorate() {
				return // a minority must not sit on the lease: resign (deferred)
			}
			a.event("lease %s acquired token %d", placement.Trainer, st.Token)
			pctx, c := context.WithCancel(ctx)
			pcancel, pdone = c, make(chan struct{})
			go func(tok uint64, done chan struct{}) {
				defer close(done)
				if err := a.train(pctx, tok); err != nil && pctx.Err() == nil {
					a.event("training failed: %v", err)
					select {
					case failed <- err:
					default:
					}
				}
			}(st.Token, pdone)
		case <-failed:
			// Give the lease up so a standby tries instead.
			stopPipeline()
			ecancel()
			<-edone
			a.event("lease %s resigned after a failure", placement.Trainer)
			return
		}
	}
}

// train claims the durable progress with token, then runs the remaining
// steps of the run in a fresh pipeline on the cluster bus, saving the
// progress (fenced by token) after every step. The pipeline's trainer
// starts from the checkpoint the progress records (restored, verified;
// a missing or corrupt one fails the term), and every version it
// publishes is checkpointed (checkpoint.go) before the step's progress,
// which records its location, is saved.
func (a *Agent) train(ctx context.Context, token uint64) error {
	var prev, p ledger.Progress
	if err := retry(ctx, 30*time.Second, func() (err error) {
		prev, _, err = a.led.Progress(ctx)
		return err
	}); err != nil {
		return err
	}
	if err := retry(ctx, 30*time.Second, func() (err error) {
		p, err = a.led.Claim(ctx, token, a.cfg.Name)
		if errors.Is(err, lease.ErrFenced) {
			return backoff.Permanent(err)
		}
		return err
	}); err != nil {
		return err
	}
	// The previous holder's episodes in flight died with its pipeline:
	// requeue them in the durable ledger (after the claim, which fenced it).
	if prev.Holder != "" {
		// The prompts of the last durable step are trained (the durable
		// weights hold them) even if the previous holder died before it
		// marked them so: complete that first, then requeue the rest.
		if err := retry(ctx, 30*time.Second, func() error { return a.markTrained(ctx, prev.Step, prev.Prompts) }); err != nil {
			return fmt.Errorf("node: mark step %d's prompts trained: %w", prev.Step, err)
		}
		// The dead node's JetStream server may have led the ledger's
		// streams: retry while the survivors elect new leaders.
		var rq []ledger.Entry
		if err := retry(ctx, 30*time.Second, func() (err error) {
			rq, err = a.led.RequeueNode(ctx, prev.Holder, a.cfg.Name)
			return err
		}); err != nil {
			return fmt.Errorf("node: requeue %s's prompts: %w", prev.Holder, err)
		}
		a.event("requeued %d prompts %s had in flight", len(rq), prev.Holder)
		// The previous term's weights are dead: its engines follow this
		// term from its own base. (Each term deletes its predecessor's, so
		// a run keeps one bucket of deltas.)
		if prev.Token != 0 && prev.Token != token {
			a.deleteTermBucket(ctx, fmt.Sprintf("%s-t%d", a.cfg.Run.Run.ID, prev.Token))
		}
	}
	cfg := a.cfg.Run
	remaining := int64(cfg.Run.Steps) - p.Step
	a.event("resume from step %d version %d (%d steps to go)", p.Step, p.Version, max(remaining, 0))
	if remaining <= 0 {
		a.doneOne.Do(func() { close(a.done) })
		a.event("run complete at step %d", p.Step)
		return nil
	}
	// Each term runs its own pipeline under its own subjects and streams
	// (run.id-t<token>): a dead holder's in-memory buffer may have died
	// with its server, and a deposed holder's late messages must not reach
	// the new term.
	cfg.Run.ID = fmt.Sprintf("%s-t%d", cfg.Run.ID, token)
	cfg.Run.Steps = int(remaining)
	cfg.Run.ReportDir = filepath.Join(cfg.Run.ReportDir, fmt.Sprintf("%s-t%d", a.cfg.Name, token))
	cfg.Bus.NATSURL = a.bus.ClientURL()
	cfg.Run.DataDir = filepath.Join(cfg.Run.DataDir, a.cfg.Name)
	// The term's engines are the engine hosts of the members (this node's
	// included): its weights go through the bus's object store.
	cfg.Publisher.Mode, cfg.Publisher.Store, cfg.Publisher.Transport = config.PublishDelta, config.StoreNATS, config.TransportStore
	// The trainer continues from the weights of the durable step: the
	// checkpoint the progress records is restored, and every new version
	// is checkpointed before its step can be recorded.
	var (
		ck     *termCkpt
		resume bool
		ckOpts Options
		err    error
	)
	if cfg.Trainer.Backend != config.BackendRemote { // a remote worker owns its weights
		resumeDir := filepath.Join(cfg.Run.DataDir, fmt.Sprintf("resume-t%d", token))
		defer os.RemoveAll(resumeDir) // read once, by Start
		if ck, resume, err = startTermCkpt(ctx, a, p, token, resumeDir); err != nil {
			return err
		}
		ckOpts.AfterStep = ck.afterStep
		if resume {
			ckOpts.TrainerCheckpoint = resumeDir
			a.event("resume from checkpoint v%d", p.Version)
		}
	}
	n, err := New(cfg, Options{Logger: a.log, InMemoryBus: a.cfg.InMemoryBus, Remote: a.remoteEngines(),
		RouterListen: a.cfg.RouterListen, RouterAdminToken: a.cfg.RouterAdminToken,
		TrainerCheckpoint: ckOpts.TrainerCheckpoint, AfterStep: ckOpts.AfterStep})
	if err != nil {
		return err
	}
	// The mirror listens before the controller admits the first prompts.
	mirror, err := a.mirrorLedger(n, token)
	if err != nil {
		return err
	}
	defer mirror.stop()
	// The term's health: the streams it depends on are probed (and the
	// lease's and buffer's leaders kept on this node's server); no step or
	// a failing stream beyond its bound is an event and ends the term
	// (ErrTermStalled) — from the start, so a term stuck while it starts
	// (a stream that cannot be created) is not a silent stall either.
	th, err := a.startTermHealth(ctx, cfg.Run.ID)
	if err != nil {
		return err
	}
	defer th.stop()
	mirror.mu.Lock()
	mirror.health = th
	mirror.mu.Unlock()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	if err := a.startWatched(ctx, n, th, tick.C); err != nil {
		return err
	}
	defer n.Stop()
	if err := th.register(n.reg, a.stepdowns); err != nil {
		return err
	}
	saved := 0
	save := func(ctx context.Context) error {
		steps := n.steps()
		for ; saved < len(steps); saved++ {
			s := steps[saved]
			prompts, ok := mirror.promptsOf(s.GroupIDs)
			if !ok {
				// The step's consumed events are still on their way to
				// the mirror: record the step at a later tick.
				return nil
			}
			np := ledger.Progress{Step: p.Step + s.Step, Version: p.Version + s.Version, Token: token, Holder: a.cfg.Name, Prompts: prompts}
			if a.beforeSave != nil {
				a.beforeSave(ctx, np.Step)
			}
			if ck != nil {
				loc, err := ck.location(s.Version)
				if err != nil {
					return err
				}
				np.Checkpoint = loc
			}
			// A server of a clustered bus that died may have led the
			// progress bucket: retry while the survivors elect a leader
			// (a fenced write is final: a newer term claimed the progress).
			if err := retry(ctx, 30*time.Second, func() error {
				err := a.led.SaveProgress(ctx, np)
				if errors.Is(err, lease.ErrFenced) {
					return backoff.Permanent(err)
				}
				return err
			}); err != nil {
				return fmt.Errorf("node: save progress: %w", err)
			}
			if ck != nil {
				ck.recorded(s.Version, np.Checkpoint)
			}
			th.stepDone(time.Now())
			// The step is durable: say so at once (a stop that interrupts
			// the marks below must not hide a durable step). Reward and the
			// engines-vs-trainer logprob mismatch tell an operator the run
			// learns and the engines serve the weights they claim (a term
			// restored wrongly shows a large mismatch).
			a.event("step %d version %d reward %.3f mismatch %.4f (same-version %.2g over %d tokens)", np.Step, np.Version,
				s.RewardMean, s.Stats.Mismatch, s.Stats.MismatchSameVersion, s.Stats.SameVersionTokens)
			// Its prompts are trained (if this node dies or stops first,
			// the next holder does this from np.Prompts).
			if err := a.markTrained(ctx, np.Step, prompts); err != nil {
				return fmt.Errorf("node: mark step %d's prompts trained: %w", np.Step, err)
			}
		}
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			// A step the trainer finished while the pipeline stopped is
			// trained: record it (fenced: refused if a newer holder has
			// claimed the progress meanwhile).
			n.Stop()
			mirror.stop()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return save(sctx)
		case <-tick.C:
		}
		if err := save(ctx); err != nil {
			return err
		}
		if err := a.checkTerm(th, time.Now()); err != nil {
			return err
		}
		if n.tr != nil {
			if err := n.tr.Err(); err != nil {
				return err
			}
		}
		// Complete only once every step is durable: the trainer may finish
		// its last step while the mirror still waits out a stream's
		// election, and a step whose prompts the mirror has not seen
		// cannot be saved yet (the watch bounds the wait: no step saved
		// for --stall-after ends the term, and the next resumes from the
		// durable step). Before, the term stopped the mirror and declared
		// the run complete at the last step it had saved (seen: 6 of 16).
		if saved >= cfg.Run.Steps {
			// Stop the pipeline first: its rollouts' running episodes are
			// aborted and requeued, and the mirror records that.
			n.Stop()
			mirror.stop()
			a.event("run complete at step %d", p.Step+int64(saved))
			// Groups admitted but not trained when the run ended (waiting
			// in the buffer or for a rollout, here or on a deposed
			// holder whose last events landed late) go back to the pool.
			if err := a.requeueAll(ctx); err != nil {
				return fmt.Errorf("node: requeue at the end: %w", err)
			}
			if err := a.reportLedger(ctx, mirror); err != nil {
				return err
			}
			a.doneOne.Do(func() { close(a.done) })
			<-ctx.Done()
			return nil
		}
	}
}

// startWatched starts the term's pipeline while its watch ticks: a start
// that outlasts the watch's bounds is cancelled and ends the term.
func (a *Agent) startWatched(ctx context.Context, n *Node, th *termHealth, tick <-chan time.Time) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	started := make(chan error, 1)
	go func() { started <- n.Start(sctx) }()
	for {
		select {
		case err := <-started:
			th.running.Store(err == nil)
			return err
		case <-tick:
			if err := a.checkTerm(th, time.Now()); err != nil {
				cancel()
				<-started // Start stops what it started when it fails
				return err
			}
		}
	}
}
