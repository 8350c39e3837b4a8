package node

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/asyncrl/asyncrl/cluster/ledger"
	"github.com/asyncrl/asyncrl/cluster/term"
	"github.com/asyncrl/asyncrl/config"
	"github.com/prometheus/client_golang/prometheus"
)

// start applies StartPipeline: the term's pipeline, its trainer restored
// from the checkpoint the claimed progress records, its ledger mirror and
// its prober. Each term runs its own pipeline under its own subjects and
// streams (run.id-t<token>): a dead holder's in-memory buffer may have
// died with its server, and a deposed holder's late messages must not
// reach the new term.
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
	subj, err := subjectsFor(v.Term)
	if err != nil {
		return err
	}
	r.term, r.subj = v.Term, subj
	// The core announces the term once the router listens, and reports
	// the groups of rollout nodes that leave aborted (termcast.go).
	rc := a.remoteEngines()
	rc.Cast = func(url string) { r.box.push(term.RouterListening{Token: v.Token, URL: url}) }
	// The core decides the term's engines and their LoadWeights
	// (termengines.go).
	rc.Target = func(engine string, version int64) {
		r.box.push(term.EngineTarget{Token: v.Token, Engine: engine, Version: version})
	}
	rc.attach = r.attachRemote
	opts := Options{Logger: a.log, InMemoryBus: a.cfg.InMemoryBus, Remote: rc, BusSecurity: &a.termBus,
		RouterListen: a.cfg.RouterListen, RouterAdminToken: a.cfg.RouterAdminToken}
	// The trainer continues from the weights of the durable step: the
	// checkpoint the progress records is restored, and every new version
	// is checkpointed before its step can be recorded.
	if cfg.Trainer.Backend != config.BackendRemote { // a remote worker owns its weights
		from := toLedgerProgress(v.From)
		r.resumeDir = filepath.Join(cfg.Run.DataDir, fmt.Sprintf("resume-t%d", v.Token))
		ck, resume, err := startTermCkpt(ctx, a, from, v.Token, r.resumeDir, r.box.push)
		if err != nil {
			return err
		}
		r.ck, opts.AfterStep = ck, ck.afterStep
		if resume {
			opts.TrainerCheckpoint = r.resumeDir
			a.event("resume from checkpoint v%d", from.Version)
		}
	}
	n, err := New(cfg, opts)
	if err != nil {
		return err
	}
	if err := r.subscribeRollouts(v.Term, v.Token); err != nil {
		return err
	}
	// The mirror listens before the controller admits the first prompts.
	if r.mirror, err = a.mirrorLedger(n, v.Token, r.box.push); err != nil {
		return err
	}
	// The term's health: the streams it depends on are probed (and the
	// lease's and buffer's leaders kept on this node's server); the core's
	// watch ends the term when no step or a failing stream outlasts its
	// bound — from the start, so a term stuck while it starts (a stream
	// that cannot be created) is not a silent stall either.
	r.th = a.startTermHealth(ctx, cfg.Run.ID, v.Token, r.box.push)
	if err := r.startWatched(ctx, n); err != nil {
		return err
	}
	r.n = n
	r.th.running.Store(true)
	r.core.Step(time.Now(), term.PipelineStarted{Token: v.Token})
	r.requeued = prometheus.NewCounter(prometheus.CounterOpts{Name: "asyncrl_node_dead_node_groups_requeued_total",
		Help: "Groups a node had in flight when it left the cluster, reported aborted by the trainer's holder so they are requeued."})
	if err := n.reg.Register(r.requeued); err != nil {
		return fmt.Errorf("node: term metrics: %w", err)
	}
	return r.th.register(n.reg, a.stepdowns)
}

// startWatched starts the term's pipeline while the core's watch ticks: a
// start that outlasts the watch's bounds is cancelled and ends the term
// (errTermOver: the core said why).
func (r *termRun) startWatched(ctx context.Context, n *Node) (err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	started := make(chan error, 1)
	go func() { started <- n.Start(sctx) }()
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
		case err = <-started:
			return err
		case <-r.box.ready:
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
			cancel()
			<-started // Start stops what it started when it fails
			return errTermOver
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
