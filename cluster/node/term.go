package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/asyncrl/asyncrl/cluster/lease"
	"github.com/asyncrl/asyncrl/cluster/ledger"
	"github.com/asyncrl/asyncrl/cluster/placement"
	"github.com/asyncrl/asyncrl/cluster/term"
	"github.com/asyncrl/asyncrl/cluster/termwatch"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/prometheus/client_golang/prometheus"
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
			go a.runTerm(pctx, st.Token, pdone, failed)
		case err := <-failed:
			// Give the lease up so a standby tries instead.
			stopPipeline()
			ecancel()
			<-edone
			if !errors.Is(err, errTermOver) {
				a.event("lease %s resigned after a failure", placement.Trainer)
			}
			return
		}
	}
}

// runTerm runs term tok until ctx ends; a failure goes to failed.
func (a *Agent) runTerm(ctx context.Context, tok uint64, done chan struct{}, failed chan<- error) {
	defer close(done)
	if err := a.train(ctx, tok); err != nil && ctx.Err() == nil {
		if !errors.Is(err, errTermOver) { // the term's core said why
			a.event("training failed: %v", err)
		}
		select {
		case failed <- err:
		default:
		}
	}
}

// errTermOver: the term's core ended the term and said why (its events).
var errTermOver = errors.New("node: term over")

// inbox is the term loop's mailbox: the mirror, the checkpointer and the
// prober (other goroutines) push the core's inputs; the loop takes them
// in order. Never full: a slow loop must not stall the bus's handlers.
type inbox struct {
	mu    sync.Mutex
	q     []term.Input
	ready chan struct{}
}

func newInbox() *inbox { return &inbox{ready: make(chan struct{}, 1)} }

func (b *inbox) push(in term.Input) {
	b.mu.Lock()
	b.q = append(b.q, in)
	b.mu.Unlock()
	select {
	case b.ready <- struct{}{}:
	default:
	}
}

func (b *inbox) take() []term.Input {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.q
	b.q = nil
	return q
}

// termRun is one term of this node's trainer lease: the decisions are a
// term.Core's (claim, requeue, what to save when, what is trained, the
// watch, run complete); train's goroutine is the only one that steps it,
// and it applies the core's Ready (the I/O, with its retries).
type termRun struct {
	a     *Agent
	token uint64
	core  *term.Core
	box   *inbox
	// The term's pieces, once StartPipeline built them.
	n         *Node
	ck        *termCkpt
	mirror    *mirror
	th        *termHealth
	resumeDir string
	// term and subj: the term's run id and subjects; rolloutSub its
	// rollout reports; requeued counts the groups of nodes that left.
	term       string
	subj       subjects
	rolloutSub transport.Subscription
	requeued   prometheus.Counter
	stopped    bool // StopPipeline applied
	fed        int  // the trainer's steps fed to the core
	// down: the core gave the lease up (StepDown applied).
	down *term.StepDown
	// rs: the pipeline's remote engines (termengines.go), attached by
	// Start's goroutine; acked the acks fed to the core.
	rsMu  sync.Mutex
	rs    *remoteSet
	acked map[string]int64
	// starting: startWatched applies the engines' effects while Start
	// runs; held, the term's first announcement, sent once it returns.
	starting bool
	held     *term.Announce
}

// train runs term token: its core claims the durable progress with the
// token, requeues what the previous holder held, and runs the remaining
// steps of the run in a fresh pipeline on the cluster bus, saving the
// progress (fenced by token) after every step, each step with the
// location of its trainer checkpoint (checkpoint.go). It returns when ctx
// ends (nil) or the core gives the term up (errTermOver).
func (a *Agent) train(ctx context.Context, token uint64) error {
	core, err := term.New(a.termConfig())
	if err != nil {
		return fmt.Errorf("%w: %w", ErrAgentConfig, err)
	}
	r := &termRun{a: a, token: token, core: core, box: newInbox()}
	defer r.close()
	r.core.Step(time.Now(), term.LeaseChanged{Leader: true, Token: token})
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		r.apply(ctx)
		if r.down != nil {
			return r.result()
		}
		select {
		case <-ctx.Done():
			r.stop()
			return nil
		case <-tick.C:
			r.poll(time.Now())
		case <-r.box.ready:
			r.feed(time.Now())
		}
	}
}

func (r *termRun) result() error {
	if r.down.Reason == term.ReasonStopping {
		return nil
	}
	if r.down.Reason == term.ReasonStalled {
		return fmt.Errorf("%w: %w", errTermOver, ErrTermStalled)
	}
	return fmt.Errorf("%w (%s)", errTermOver, r.down.Reason)
}

// stop: the term's context ended (the lease lost, quorum lost, the node
// stops). A step the trainer finished while the pipeline stopped is
// trained: the core saves it (fenced: refused if a newer holder has
// claimed the progress meanwhile), then gives the term up.
func (r *termRun) stop() {
	r.stopPipeline()
	now := time.Now()
	r.feed(now)
	r.feedSteps(now)
	r.core.Step(now, term.Stop{})
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r.apply(sctx)
}

func (r *termRun) close() {
	r.stopPipeline()
	if r.th != nil {
		r.th.stop()
	}
	if r.rolloutSub != nil {
		_ = r.rolloutSub.Unsubscribe()
	}
	if r.resumeDir != "" {
		_ = os.RemoveAll(r.resumeDir) // read once, by Start
	}
}

// feed steps the core with what the other goroutines reported.
func (r *termRun) feed(now time.Time) {
	for _, in := range r.box.take() {
		r.core.Step(now, in)
	}
}

// feedSteps steps the core with the trainer's steps it has not seen.
func (r *termRun) feedSteps(now time.Time) {
	if r.n == nil {
		return
	}
	steps := r.n.steps()
	for ; r.fed < len(steps); r.fed++ {
		s := steps[r.fed]
		r.core.Step(now, term.StepTrained{Token: r.token, Step: s.Step, Version: s.Version, Groups: s.GroupIDs,
			Reward: s.RewardMean, Mismatch: s.Stats.Mismatch, SameVersion: s.Stats.MismatchSameVersion, SameVersionTokens: int64(s.Stats.SameVersionTokens)})
	}
}

// poll feeds the inbox, the trainer's steps and its failure, then ticks
// the core (its watch).
func (r *termRun) poll(now time.Time) {
	r.feed(now)
	if r.term != "" && !r.stopped {
		r.members(now)
	}
	r.feedServing(now)
	if r.n != nil && !r.stopped {
		r.feedSteps(now)
		if r.n.tr != nil {
			if err := r.n.tr.Err(); err != nil {
				r.core.Step(now, term.Failed{Token: r.token, Err: err.Error()})
			}
		}
	}
	r.core.Tick(now)
	if r.th != nil {
		r.th.failing.Set(float64(len(r.core.Failing())))
	}
}

// apply applies the core's Ready until it has nothing more to say; the
// effects' answers are stepped as they come.
func (r *termRun) apply(ctx context.Context) {
	for {
		rd := r.core.Ready()
		if rd.Empty() {
			return
		}
		r.core.Advance()
		for _, e := range rd.Events {
			r.say(e)
		}
		for _, e := range rd.Effects {
			r.do(ctx, e)
		}
	}
}

// say prints an event (the lines an operator and the tests read), counts
// the watch's step-downs and keeps the step gauge.
func (r *termRun) say(e term.Event) {
	a := r.a
	switch {
	case e.Kind == term.Ignored:
		a.log.Debug().Str("node", a.cfg.Name).Msg("term: " + e.String())
		return
	case e.Kind == term.LeaseAcquired: // contendOnce said so
		return
	case e.Kind == term.Resigned && e.Reason == term.ReasonStopping: // a clean stop is no news
		return
	case e.Kind == term.TermFailed && e.Reason == term.ReasonStopping:
		a.log.Warn().Str("node", a.cfg.Name).Msg("term: while stopping: " + e.Err)
		return
	case e.Kind == term.LeaderMoved:
		e.Node = a.bus.ServerName()
	case e.Kind == term.Watch && e.Watch.Kind == termwatch.StepDown:
		a.stepdowns.WithLabelValues(string(e.Watch.Reason)).Inc()
	case e.Kind == term.StepDurable && r.th != nil:
		r.th.lastNs.Store(time.Now().UnixNano())
	}
	a.event("%s", e)
}

// do applies one effect.
func (r *termRun) do(ctx context.Context, e term.Effect) {
	a := r.a
	switch v := e.(type) {
	case term.ClaimProgress:
		r.claim(ctx)
	case term.MarkTrained:
		if err := retry(ctx, 30*time.Second, func() error { return a.markTrained(ctx, v.Step, toLedgerPrompts(v.Prompts)) }); err != nil {
			r.failed(ctx, fmt.Errorf("node: mark step %d's prompts trained: %w", v.Step, err))
		}
	case term.RequeueNode:
		r.requeue(ctx, v.Node)
	case term.RequeueStale:
		r.requeueStale(ctx, v.Token)
	case term.DeleteTermBucket:
		a.deleteTermBucket(ctx, v.Term)
	case term.StartPipeline:
		if err := r.start(ctx, v); err != nil && !errors.Is(err, errTermOver) {
			r.failed(ctx, err)
		}
	case term.StopPipeline:
		r.stopPipeline()
	case term.SaveProgress:
		r.save(ctx, v.Progress)
	case term.Prune:
		r.prune(ctx, v)
	case term.Announce:
		if r.starting {
			r.held = &v // sent once Start returns
			return
		}
		r.announce(ctx, v)
	case term.AbortGroups:
		r.abortGroups(v)
	case term.Finish:
		r.finish(ctx)
	case term.Done:
		a.doneOne.Do(func() { close(a.done) })
	case term.StepDown:
		r.down = &v
	default:
		if !r.doEngines(e) {
			a.log.Debug().Str("node", a.cfg.Name).Msgf("term: effect %T not wired", e)
		}
	}
}

// prune applies Prune. A failed prune costs space, not safety: the next
// one tries again.
func (r *termRun) prune(ctx context.Context, v term.Prune) {
	if r.ck != nil {
		if err := r.ck.store.Prune(ctx, v.Version, v.Token, v.Durable); err != nil {
			r.a.log.Warn().Err(err).Msg("checkpoint prune failed; the next save tries again")
		}
	}
}

// failed tells the core the term cannot go on, unless the term's context
// ended (the error is then that, and the core is told Stop instead).
func (r *termRun) failed(ctx context.Context, err error) {
	if ctx.Err() == nil {
		r.core.Step(time.Now(), term.Failed{Token: r.token, Err: err.Error()})
	}
}

// claim reads the durable progress and claims it with the term's token.
func (r *termRun) claim(ctx context.Context) {
	a := r.a
	var prev, p ledger.Progress
	if err := retry(ctx, 30*time.Second, func() (err error) {
		prev, _, err = a.led.Progress(ctx)
		return err
	}); err != nil {
		r.failed(ctx, err)
		return
	}
	if err := retry(ctx, 30*time.Second, func() (err error) {
		p, err = a.led.Claim(ctx, r.token, a.cfg.Name)
		if errors.Is(err, lease.ErrFenced) {
			return backoff.Permanent(err)
		}
		return err
	}); err != nil {
		r.failed(ctx, err)
		return
	}
	r.core.Step(time.Now(), term.ProgressClaimed{Token: r.token, Prev: toTermProgress(prev), Claimed: toTermProgress(p)})
}

// requeue requeues node's prompts in flight. The dead node's JetStream
// server may have led the ledger's streams: retry while the survivors
// elect new leaders.
func (r *termRun) requeue(ctx context.Context, node string) {
	var rq []ledger.Entry
	if err := retry(ctx, 30*time.Second, func() (err error) {
		rq, err = r.a.led.RequeueNode(ctx, node, r.a.cfg.Name)
		return err
	}); err != nil {
		r.failed(ctx, fmt.Errorf("node: requeue %s's prompts: %w", node, err))
		return
	}
	r.core.Step(time.Now(), term.NodeRequeued{Token: r.token, Node: node, Count: len(rq)})
}

// save writes the step's progress, fenced by the token. A server of a
// clustered bus that died may have led the progress bucket: retry while
// the survivors elect a leader (a fenced write is final: a newer term
// claimed the progress).
func (r *termRun) save(ctx context.Context, tp term.Progress) {
	a, p := r.a, toLedgerProgress(tp)
	if a.beforeSave != nil {
		a.beforeSave(ctx, p.Step)
	}
	err := retry(ctx, 30*time.Second, func() error {
		err := a.led.SaveProgress(ctx, p)
		if errors.Is(err, lease.ErrFenced) {
			return backoff.Permanent(err)
		}
		return err
	})
	if err != nil {
		r.core.Step(time.Now(), term.SaveFailed{Token: r.token, Step: p.Step, Fenced: errors.Is(err, lease.ErrFenced), Err: "node: save progress: " + err.Error()})
		return
	}
	r.core.Step(time.Now(), term.ProgressSaved{Token: r.token, Step: p.Step})
}

// finish: the run is complete. Groups admitted but not trained (waiting
// in the buffer or for a rollout, here or on a deposed holder whose last
// events landed late) go back to the pool; the ledger's counts are
// reported.
func (r *termRun) finish(ctx context.Context) {
	r.stopPipeline()
	if err := r.a.requeueAll(ctx); err != nil {
		r.failed(ctx, fmt.Errorf("node: requeue at the end: %w", err))
		return
	}
	if r.mirror != nil {
		if err := r.a.reportLedger(ctx, r.mirror); err != nil {
			r.failed(ctx, err)
		}
	}
}

// stopPipeline stops the term's pipeline (its rollouts' running episodes
// are aborted and requeued) and then its mirror, which records that.
func (r *termRun) stopPipeline() {
	if r.stopped {
		return
	}
	r.stopped = true
	if r.n != nil {
		r.n.Stop()
	}
	if r.mirror != nil {
		r.mirror.stop()
	}
}
