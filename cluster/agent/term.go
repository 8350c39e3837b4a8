package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/asyncrl/asyncrl/actors/loop"
	"github.com/asyncrl/asyncrl/actors/trainer"
	"github.com/asyncrl/asyncrl/cluster/internal/retry"
	"github.com/asyncrl/asyncrl/cluster/lease/contender"
	"github.com/asyncrl/asyncrl/cluster/ledger"
	"github.com/asyncrl/asyncrl/cluster/node"
	"github.com/asyncrl/asyncrl/cluster/term"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/prometheus/client_golang/prometheus"
)

// errTermOver: the term's core ended the term and said why (its events).
var errTermOver = errors.New("node: term over")

// inbox is the term loop's mailbox (a loop.Inbox without a limit): the
// mirror, the checkpointer and the prober (other goroutines) push the
// core's inputs; the loop takes them in order. Never full: a slow loop
// must not stall the bus's handlers.
type inbox struct{ *loop.Inbox[term.Input] }

func newInbox() *inbox { return &inbox{loop.NewInbox[term.Input](0)} }

// push never blocks (no limit), so it needs no context.
func (b *inbox) push(in term.Input) { b.Push(context.Background(), in) }

func (b *inbox) take() []term.Input { return b.Take(0) }

// termRun is one term of this node's trainer lease: the decisions are the
// contention's term.Core's (claim, requeue, what to save when, what is
// trained, the watch, run complete); the contention's goroutine is the
// only one that steps it, and it applies the core's Ready (the I/O, with
// its retries) through the term that runs.
type termRun struct {
	a     *Agent
	token uint64
	core  *term.Core
	box   *inbox
	// The term's pieces, once StartPipeline built them.
	n         *node.Node
	ck        *termCkpt
	mirror    *mirror
	th        *termHealth
	resumeDir string
	// term and subj: the term's run id and subjects; rolloutSub its
	// rollout reports; requeued counts the groups of nodes that left.
	term       string
	subj       transport.RunPlan
	rolloutSub transport.Subscription
	requeued   prometheus.Counter
	stopped    bool // StopPipeline applied
	fed        int  // the trainer's steps fed to the core
	// ctx is the term's: cancelled when the term is over, or at once
	// when the lease or quorum is lost (its I/O ends); applyAll applies the
	// contention core's Ready (contend.go).
	ctx      context.Context
	applyAll func()
	// rs: the pipeline's remote engines (termengines.go), attached by
	// Start's goroutine; acked the acks fed to the core.
	rsMu  sync.Mutex
	rs    *node.EngineSet
	acked map[string]int64
	// starting: startWatched applies the engines' effects while Start
	// runs; held, the term's first announcement, sent once it returns.
	starting bool
	held     *term.Announce
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
	steps, next := r.n.Steps(r.fed)
	r.fed = next
	for _, s := range steps {
		if s.GroupIDs == nil && s.Groups > 0 {
			// Fed GroupIDsKept steps late: its groups are gone, and a
			// save without them would leave its prompts in flight.
			r.core.Step(now, term.Failed{Token: r.token, Err: fmt.Sprintf("step %d was fed to the term after its group ids were dropped (over %d steps late)", s.Step, trainer.GroupIDsKept)})
			return
		}
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
		if err := r.n.Err(); err != nil {
			r.core.Step(now, term.Failed{Token: r.token, Err: err.Error()})
		}
	}
	r.core.Tick(now)
	if r.th != nil {
		r.th.failing.Set(float64(len(r.core.Failing())))
	}
}

// do applies one effect.
func (r *termRun) do(ctx context.Context, e term.Effect) {
	a := r.a
	switch v := e.(type) {
	case term.ClaimProgress:
		r.claim(ctx)
	case term.MarkTrained:
		r.markTrained(ctx, v)
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

// markWithin bounds the writes of one durable step's trained marks;
// markAttempt one try (a request to a stream whose leader just died can
// hang until its deadline).
const (
	markWithin  = 2 * time.Minute
	markAttempt = 10 * time.Second
)

// markTrained applies MarkTrained off the term's goroutine. The step is
// durable, so its marks are facts that must land even when the term's
// context ends meanwhile (a stop, a lost lease) — marks cut short there
// left the step's prompts in flight, and the next holder, which marks only
// the last durable step's, requeued them as never trained (21 of 24 in
// TestRemoteEnginesFollowNewTerm). And they must not stall the term: a
// ledger stream electing a leader after a node died held the goroutine
// (so the trainer's steps and the dead node's engines waited) for the
// whole retry, then dropped the marks (60 of 64 in the node-loss e2e). A
// clean stop waits for them before it resigns (contention.stop). The
// core hears when they are written (Marked): it saves no later step
// before, since a claim marks only the last durable step's prompts.
func (r *termRun) markTrained(_ context.Context, v term.MarkTrained) {
	a, prompts, box, token := r.a, toLedgerPrompts(v.Prompts), r.box, r.token
	a.marks.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), markWithin)
		defer cancel()
		done := map[string]bool{}
		err := retry.Do(ctx, markWithin, func() error {
			actx, acancel := context.WithTimeout(ctx, markAttempt)
			defer acancel()
			return a.markTrained(actx, v.Step, prompts, done)
		})
		in := term.Marked{Token: token, Step: v.Step}
		if err != nil {
			a.log.Error().Err(err).Int64("step", v.Step).Str("node", a.cfg.Name).
				Msg("term: a durable step's prompts not marked trained; the term ends and the next claim marks them")
			in.Err = err.Error()
		}
		box.push(in)
	})
}

// waitMarks waits for the trained marks being written, at most d.
func (a *Agent) waitMarks(d time.Duration) {
	done := make(chan struct{})
	go func() { a.marks.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
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
	if err := retry.Do(ctx, 30*time.Second, func() (err error) {
		prev, _, err = a.led.Progress(ctx)
		return err
	}); err != nil {
		r.failed(ctx, err)
		return
	}
	if err := retry.Do(ctx, 30*time.Second, func() (err error) {
		p, err = a.led.Claim(ctx, r.token, a.cfg.Name)
		if errors.Is(err, contender.ErrFenced) {
			return retry.Permanent(err)
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
	r.a.waitMarks(markWithin) // as requeueStale: marks in flight are trained prompts
	var rq []ledger.Entry
	if err := r.a.ledgerRetry(ctx, func() (err error) {
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
	a.hold(HoldSave, p.Step)
	err := retry.Do(ctx, 30*time.Second, func() error {
		err := a.led.SaveProgress(ctx, p)
		if errors.Is(err, contender.ErrFenced) {
			return retry.Permanent(err)
		}
		return err
	})
	if err != nil && ctx.Err() != nil {
		// Interrupted: the lease or quorum loss that did it is in the
		// inbox; the core hears it first (and ignores the failure).
		r.feed(time.Now())
	}
	if err != nil {
		r.core.Step(time.Now(), term.SaveFailed{Token: r.token, Step: p.Step, Fenced: errors.Is(err, contender.ErrFenced), Err: "node: save progress: " + err.Error()})
		return
	}
	a.hold(HoldMarks, p.Step)
	r.core.Step(time.Now(), term.ProgressSaved{Token: r.token, Step: p.Step})
}

// finish: the run is complete. Groups admitted but not trained (waiting
// in the buffer or for a rollout, here or on a deposed holder whose last
// events landed late) go back to the pool; the ledger's counts are
// reported.
func (r *termRun) finish(ctx context.Context) {
	r.stopPipeline()
	if r.mirror != nil {
		r.mirror.wait(mirrorWithin) // its last write lands before the sweep
	}
	// The last steps' trained marks first: the sweep below would take
	// their prompts, still unmarked, for prompts in flight.
	r.a.waitMarks(markWithin)
	// Both list the ledger, which fails while its stream elects a leader
	// or a replica lags (ledger.Entries): retried, as every other write
	// of the term's end. Both are idempotent.
	if err := retry.Do(ctx, markWithin, func() error { return r.a.requeueAll(ctx) }); err != nil {
		r.failed(ctx, fmt.Errorf("node: requeue at the end: %w", err))
		return
	}
	if err := retry.Do(ctx, markWithin, func() error { return r.a.reportLedger(ctx) }); err != nil {
		r.failed(ctx, err)
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
