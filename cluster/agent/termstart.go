package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/asyncrl/asyncrl/cluster/ledger"
	"github.com/asyncrl/asyncrl/cluster/node"
	"github.com/asyncrl/asyncrl/cluster/term"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/prometheus/client_golang/prometheus"
)

// start applies StartPipeline: the term's pipeline, its trainer restored
// from the checkpoint the claimed progress records, its ledger mirror and
// its prober. Each term runs its own pipeline under its own subjects and
// streams (run.id-t<token>): a dead holder's in-memory buffer may have
// died with its server, and a deposed holder's late messages must not
// reach the new term. All of its I/O runs while the core's watch ticks
// (startWatched): a start that hangs anywhere — a checkpoint download, a
// stream that is never created, engines that never load version 0 — is
// a stalled start the watch ends (issue 37: a term logged its resume and
// then nothing for 180 s).
func (r *termRun) start(ctx context.Context, v term.StartPipeline) error {
	a := r.a
	cfg := a.cfg.Run
	cfg.Run.ID = v.Term
	cfg.Run.Steps = int(v.Steps)
	cfg.Run.ReportDir = filepath.Join(cfg.Run.ReportDir, fmt.Sprintf("%s-t%d", a.cfg.Name, v.Token))
	cfg.Bus.NATSURL = a.bus.ClientURL()
	// The term connects as this node does (Options.BusSecurity): the role
	// permissions were this node's server's to apply.
	cfg.Bus.RolePermissions = false
	cfg.Run.DataDir = filepath.Join(cfg.Run.DataDir, a.cfg.Name)
	// The term's engines are the engine hosts of the members (this node's
	// included): its weights go through the bus's object store.
	cfg.Publisher.Mode, cfg.Publisher.Store, cfg.Publisher.Transport = config.PublishDelta, config.StoreNATS, config.TransportStore
	subj, err := transport.Plan(v.Term)
	if err != nil {
		return err
	}
	r.term, r.subj = v.Term, subj
	// The core announces the term once the router listens, and reports
	// the groups of rollout nodes that leave aborted (termcast.go); it
	// decides the term's engines and their LoadWeights (termengines.go).
	rc := &node.RemoteEngines{BaseRun: a.cfg.Run.Run.ID, Replicas: a.cfg.Replicas,
		Term: &termEngines{r: r, token: v.Token, ready: map[string]bool{}}}
	// Each phase is an event too, so a slow takeover's events say where
	// its start spent the time (streams made while JetStream elects a
	// meta leader, version 0 saved, engines registered).
	phase := func(p string) {
		line := "term start: " + p
		a.log.Info().Str("node", a.cfg.Name).Str("term", v.Term).Msg(line)
		a.emit(line, EventRecord{Kind: TextKind, Agent: a.cfg.Name, Line: line})
		r.box.push(term.StartPhase{Token: v.Token, Phase: p})
	}
	opts := node.Options{Logger: a.log, InMemoryBus: a.cfg.InMemoryBus, Remote: rc, BusSecurity: &a.termBus,
		RouterListen: a.cfg.RouterListen, RouterAdminToken: a.cfg.RouterAdminToken, OnStartPhase: phase,
		BeforeAnnounce: func(version int64) { a.hold(HoldPublish, v.From.Version+version) }}
	a.setRankLinks(&opts, v.Term, v.Token)
	p, err := r.startWatched(ctx, func(sctx context.Context) (*termPieces, error) { return r.build(sctx, ctx, v, cfg, opts, phase) })
	if err != nil {
		return err
	}
	r.n, r.ck, r.mirror, r.th, r.rolloutSub, r.resumeDir = p.n, p.ck, p.mirror, p.th, p.rolloutSub, p.resumeDir
	r.th.running.Store(true)
	r.core.Step(time.Now(), term.PipelineStarted{Token: v.Token})
	r.requeued = prometheus.NewCounter(prometheus.CounterOpts{Name: "asyncrl_node_dead_node_groups_requeued_total",
		Help: "Groups a node had in flight when it left the cluster, reported aborted by the trainer's holder so they are requeued."})
	if err := p.n.Register(r.requeued); err != nil {
		return fmt.Errorf("node: term metrics: %w", err)
	}
	return r.th.register(p.n, a.stepdowns)
}

// termPieces are what a term's start built (on the start's goroutine),
// handed to the term loop once the pipeline runs.
type termPieces struct {
	n          *node.Node
	ck         *termCkpt
	mirror     *mirror
	th         *termHealth
	rolloutSub transport.Subscription
	resumeDir  string
}

// close undoes what a start that failed (or was given up) built.
func (p *termPieces) close() {
	if p.n != nil {
		p.n.Stop()
	}
	if p.mirror != nil {
		p.mirror.stop()
	}
	if p.th != nil {
		p.th.stop()
	}
	if p.rolloutSub != nil {
		_ = p.rolloutSub.Unsubscribe()
	}
	if p.resumeDir != "" {
		_ = os.RemoveAll(p.resumeDir)
	}
}

// build is the I/O of a term's start, on the start's goroutine (ctx ends
// with the start; termCtx, the term's, bounds the prober): the checkpoint
// the claimed progress records, the pipeline, the rollout reports'
// subscription, the ledger mirror, the prober, and the pipeline's start
// (streams, base weights, engines at version 0). On an error everything
// it built is undone.
func (r *termRun) build(ctx, termCtx context.Context, v term.StartPipeline, cfg config.Config, opts node.Options, phase func(string)) (p *termPieces, err error) {
	a := r.a
	p = &termPieces{}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	// The trainer continues from the weights of the durable step: the
	// checkpoint the progress records is restored, and every new version
	// is checkpointed before its step can be recorded.
	if cfg.Trainer.Backend != config.BackendRemote { // a remote worker owns its weights
		from := toLedgerProgress(v.From)
		p.resumeDir = filepath.Join(cfg.Run.DataDir, fmt.Sprintf("resume-t%d", v.Token))
		exec := cfg.Trainer.Backend == config.BackendExec
		ck, resume, err := startTermCkpt(ctx, a, from, v.Token, p.resumeDir, exec, r.box.push)
		if err != nil {
			return p, err
		}
		p.ck = ck
		setTermCheckpoint(&opts, ck, exec, resume, p.resumeDir, from.Version)
		if resume {
			a.event("resume from checkpoint v%d", from.Version)
		}
		phase("checkpoint store open")
	}
	if p.n, err = node.New(cfg, opts); err != nil {
		return p, err
	}
	if p.rolloutSub, err = r.subscribeRollouts(v.Term, v.Token); err != nil {
		return p, err
	}
	// The mirror listens before the controller admits the first prompts.
	if p.mirror, err = a.mirrorLedger(r.subj.Ledger, v.Token, r.box.push); err != nil {
		return p, err
	}
	// The term's health: the streams it depends on are probed (and the
	// lease's and buffer's leaders kept on this node's server); the core's
	// watch ends the term when no step or a failing stream outlasts its
	// bound.
	p.th = a.startTermHealth(termCtx, cfg.Run.ID, v.Token, r.box.push)
	phase("pipeline built")
	n := p.n
	p.n = nil // Start stops what it started when it fails
	if err := n.Start(ctx); err != nil {
		return p, err
	}
	p.n = n
	return p, nil
}

// startWaitStop bounds how long a start given up (by the core: a lost
// lease, the watch) may take to stop what it built before the loop moves
// on (it cleans up after itself then).
const startWaitStop = time.Minute

// startWatched runs build on a goroutine of its own while the core's
// watch ticks and its effects are applied: a start that outlasts the
// watch's bounds is cancelled and ends the term (errTermOver: the core
// said why).
func (r *termRun) startWatched(ctx context.Context, build func(context.Context) (*termPieces, error)) (p *termPieces, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		p   *termPieces
		err error
	}
	started := make(chan result, 1)
	var abandoned atomic.Bool
	go func() {
		p, err := build(sctx)
		if err == nil && abandoned.Load() {
			p.close() // the loop gave it up meanwhile
		}
		started <- result{p, err}
	}()
	r.starting = true
	defer func() {
		r.starting = false
		if err == nil && r.held != nil && !r.stopped {
			r.announce(ctx, *r.held)
		}
		r.held = nil
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case res := <-started:
			return res.p, res.err
		case <-r.box.Ready():
			r.feed(time.Now())
		case <-tick.C:
			r.poll(time.Now())
		}
		// The engines' effects cannot wait for Start: it waits for an
		// engine to load version 0. A term the core gave up (the lease or
		// quorum lost, the watch) has its Ready applied by the contention
		// once Start stopped.
		if r.holding() {
			r.applyAll()
		}
		if !r.holding() {
			abandoned.Store(true)
			cancel()
			select {
			case res := <-started:
				if res.err == nil {
					res.p.close()
				}
			case <-time.After(startWaitStop):
				r.a.log.Error().Str("node", r.a.cfg.Name).Str("term", r.term).
					Msgf("term: its start did not stop within %s of being given up; it stops what it built when it does", startWaitStop)
			}
			return nil, errTermOver
		}
	}
}

// holding reports whether the core still runs this term.
func (r *termRun) holding() bool {
	tok, holding := r.core.Holding()
	return holding && tok == r.token
}

func toTermProgress(p ledger.Progress) term.Progress {
	out := term.Progress{Step: p.Step, Version: p.Version, Checkpoint: p.Checkpoint, Token: p.Token, Holder: p.Holder}
	for _, pa := range p.Prompts {
		out.Prompts = append(out.Prompts, term.PromptAttempt{Prompt: pa.PromptID, Group: pa.GroupID, Attempt: pa.Attempt})
	}
	return out
}

func toLedgerProgress(p term.Progress) ledger.Progress {
	return ledger.Progress{Step: p.Step, Version: p.Version, Checkpoint: p.Checkpoint, Token: p.Token, Holder: p.Holder,
		Prompts: toLedgerPrompts(p.Prompts)}
}

func toLedgerPrompts(ps []term.PromptAttempt) []ledger.PromptAttempt {
	var out []ledger.PromptAttempt
	for _, pa := range ps {
		out = append(out, ledger.PromptAttempt{PromptID: pa.Prompt, GroupID: pa.Group, Attempt: pa.Attempt})
	}
	return out
}

// setTermCheckpoint points the term's pipeline at its checkpointing: the
// built-in trainer's (AfterStep, TrainerCheckpoint) or the trainer
// child's (AfterExecStep, ExecCheckpoint at the durable version).
func setTermCheckpoint(opts *node.Options, ck *termCkpt, exec, resume bool, dir string, version int64) {
	if exec {
		opts.AfterExecStep = ck.afterExecStep
		if resume {
			opts.ExecCheckpoint, opts.ExecCheckpointVersion = dir, version
		}
		return
	}
	opts.AfterStep = ck.afterStep
	if resume {
		opts.TrainerCheckpoint = dir
	}
}
