package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/asyncrl/asyncrl/cluster/term"
)

// pipe is a term's pipeline, minimal: its controller's groups, its
// trainer, its publisher and its router's view of the engines.
type pipe struct {
	node    *tnode
	token   uint64
	base    term.Progress
	steps   int64
	stopped bool
	// stalled: its start hangs (a start-stall fault) and never reports
	// started; routerUp: it hung after its router listened (its engines
	// load the term's version 0 and serve it), else before (its engines
	// never get a LoadWeights).
	stalled, routerUp bool
	// groups: group → state, for the groups taken in this term.
	groups   map[string]*pgroup
	finished []*pgroup // delivered, not trained yet
	training bool
	local    int64 // local steps trained
	// router: engine → acked version of this term (-1: registered, none);
	// regAt: when it was registered; targets: (time, version) published.
	router  map[string]int64
	regAt   map[string]time.Duration
	targets []target
	aborted map[string]int
	// mq: the events its ledger mirror has yet to record; mbusy: one is
	// being written (failover_ledger.go).
	mq    []ledgerEvent
	mbusy bool
	// mirrorAt: when the mirror hears the last event sent to it (events
	// keep their order however late they come).
	mirrorAt time.Duration
	// removed: engines taken out of routing, and when (the publisher
	// hears of it late: failover_extra.go).
	removed map[string]time.Duration
	// rg: the term's trainer group's remote ranks, rgSeq its groups so
	// far (failover_ranks.go).
	rg    *rankGroup
	rgSeq int
}

type target struct {
	at      time.Duration
	version int64
}

type pgroup struct {
	id, prompt string
	attempt    int
	rollout    *rnode
	token      uint64
	state      string // running, finished, aborted, trained
}

// deliver: a rollout node's finished group reaches the term's trainer.
func (p *pipe) deliver(g *pgroup) {
	if p.stopped || (g.state != "running" && g.state != "buffered") || p.node.pipe != p {
		return
	}
	if p.bufferWaits(g) {
		return
	}
	g.state = "finished"
	p.finished = append(p.finished, g)
	p.train()
}

// train runs one step when a batch is ready.
func (p *pipe) train() {
	n, w := p.node, p.node.w
	if p.training || p.stopped || p.local >= p.steps || len(p.finished) < w.batch {
		return
	}
	batch := p.finished[:w.batch]
	p.finished = slices.Clone(p.finished[w.batch:])
	p.training = true
	n.later(w.jitter(200*msec, 800*msec), "", func() {
		p.training = false
		p.local++
		var ids []string
		for _, g := range batch {
			g.state = "trained"
			ids = append(ids, g.id)
		}
		ver := p.base.Version + p.local
		w.logf("%s: trainer step %d (version %d) of token %d from %v", n.name, p.local, ver, p.token, ids)
		n.stepTrained(term.StepTrained{Token: p.token, Step: p.local, Version: p.local, Groups: ids})
		n.step(term.CheckpointSaved{Token: p.token, Version: p.local, Location: fmt.Sprintf("ckpt/t%d/v%d", p.token, p.local)})
		n.maybeStopAtLast(p)
		if !p.stopped {
			p.targets = append(p.targets, target{w.clock, ver})
			for _, e := range p.dispatchTo() {
				n.step(term.EngineTarget{Token: p.token, Engine: e, Version: ver})
			}
		}
		p.train()
	})
}
