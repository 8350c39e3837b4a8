package sim

import (
	"slices"
	"time"

	"github.com/asyncrl/asyncrl/actors/rollout/outcome"
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
	local    int64     // local steps trained (the trainer's local version)
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
	// tr: the term's trainer around the production step rule
	// (failover_steprule.go); pub its publisher shell over the tracker
	// core (failover_publish.go).
	tr  pipeTrainer
	pub *pipePub
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
	state      string // running, buffered, finished, aborted, trained
	// pipe: the term's pipeline that assigned it.
	pipe *pipe
	// fate: the rollout outcome core's group (failover_outcome.go); eps
	// its episodes that ended; storeBegan when its store began, storeFails
	// the store's failed tries.
	fate       *outcome.Group
	eps        []bool
	storeBegan time.Duration
	storeFails int
	// requeued: how often the term's controller requeued it (at most
	// once), onReports whether on its rollout's own reports.
	requeued  int
	onReports bool
}

// deliver: a rollout node's stored group reaches the term's trainer (the
// judge takes it from the trajectory buffer).
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

// train hands the term's trainer its next batch when one is ready and
// the step rule is idle (failover_steprule.go): the controller sends a
// step's batch only once the step before it was announced.
func (p *pipe) train() {
	w := p.node.w
	if p.stopped || p.local >= p.steps || len(p.finished) < w.batch || !p.ruleIdle() {
		return
	}
	batch := p.finished[:w.batch]
	p.finished = slices.Clone(p.finished[w.batch:])
	p.receive(batch)
}
