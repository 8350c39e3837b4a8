package agent

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/asyncrl/asyncrl/cluster"
	"github.com/asyncrl/asyncrl/cluster/lease"
	"github.com/asyncrl/asyncrl/cluster/node"
	"github.com/asyncrl/asyncrl/cluster/term"
	"github.com/asyncrl/asyncrl/transport"
)

// ErrTermStalled: the term made no progress within its bounds
// (termwatch); its holder gives the lease up so a clean term starts from
// the durable step.
var ErrTermStalled = errors.New("node: term stalled")

// termDep is a JetStream stream a term depends on, with the durable
// consumers of it that matter; lead: the holder keeps its leader (and the
// consumers') on its own server.
type termDep struct {
	stream    string
	consumers []string
	lead      bool
	// term: created by the term's pipeline as it starts; probed once the
	// pipeline runs.
	term bool
}

// termDeps names the streams a term depends on: the leases (led by the
// holder, so a renewal never waits for an election while the holder's
// server lives), its trajectory buffer and the sampling actor's consumer
// of it (led by the holder: the buffer's stores and deliveries are the
// term's hot path), its ledger stream, the run's durable ledger, trainer
// checkpoints, the term's weight bucket and the name claims (probed only:
// their writes are retried through an election).
//
// run and term are the plans of the base run and of the term. A KV
// bucket's stream is KV_<bucket>, an object store's OBJ_<bucket> (NATS's
// naming).
func termDeps(run, term transport.RunPlan) []termDep {
	deps := []termDep{{stream: "KV_" + lease.DefaultBucket, lead: true},
		{stream: term.GroupStream, consumers: []string{"sampling"}, lead: true, term: true},
		{stream: term.LedgerStream, term: true}, {stream: "OBJ_" + term.WeightsBucket, term: true}}
	for _, s := range []string{"KV_" + run.PromptsBucket, "KV_" + run.ProgressBucket, run.DurableGroupStream,
		"OBJ_" + run.CheckpointBucket, "KV_" + cluster.NamesBucket} {
		deps = append(deps, termDep{stream: s})
	}
	return deps
}

// errNoLeader: a replicated stream is electing its leader.
var errNoLeader = errors.New("no leader (electing)")

// keepLeaders probes the term's dependencies every interval and, on a
// clustered bus, moves their leaders to this node's server
// (natsbus.PreferLeader): the holder's own writes then never wait for an
// election when another node dies, and the lease outlives the loss of any
// server but its own. Results go to report as term.Probe inputs (the
// term's loop steps the core, whose watch judges them).
func (a *Agent) keepLeaders(ctx context.Context, token uint64, deps []termDep, running *atomic.Bool, interval time.Duration, report func(term.Input)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		for _, d := range deps {
			if d.term && !running.Load() {
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			probe := a.bus.ProbeStream
			if d.lead {
				probe = a.bus.PreferLeader
			}
			h, err := probe(pctx, d.stream, d.consumers...)
			cancel()
			if err == nil && h.Leader == "" {
				err = errNoLeader
			}
			if ctx.Err() != nil {
				return
			}
			pr := term.Probe{Token: token, Dep: d.stream, Moved: h.Moved}
			if err != nil {
				pr.Err = err.Error()
			}
			report(pr)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// termHealth is a term's prober and its gauges; the watch itself is the
// term core's (cluster/term), stepped by the term's loop.
type termHealth struct {
	cancel  context.CancelFunc
	done    chan struct{}
	lastNs  atomic.Int64 // the term's last durable step, for the gauge
	failing prometheus.Gauge
	// running: the term's pipeline started (its own streams exist).
	running atomic.Bool
}

// startTermHealth starts the term's prober; its results go to report.
func (a *Agent) startTermHealth(ctx context.Context, termName string, token uint64, report func(term.Input)) *termHealth {
	th := &termHealth{done: make(chan struct{}),
		failing: prometheus.NewGauge(prometheus.GaugeOpts{Name: "asyncrl_node_term_dependencies_failing",
			Help: "JetStream streams the trainer holder's term depends on that failed their last probe."})}
	th.lastNs.Store(time.Now().UnixNano())
	pctx, cancel := context.WithCancel(ctx)
	th.cancel = cancel
	// termName is term.TermName of the validated run id: a valid token.
	tp, _ := transport.Plan(termName)
	go func() {
		defer close(th.done)
		a.keepLeaders(pctx, token, termDeps(a.base(), tp), &th.running, time.Second, report)
	}()
	return th
}

// register adds the term's health metrics (and the node's step-down
// count) to the term's registry.
func (th *termHealth) register(n *node.Node, stepdowns prometheus.Collector) error {
	since := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "asyncrl_node_term_seconds_since_step",
		Help: "Seconds since the trainer holder's term last completed a step (it steps down at --stall-after)."},
		func() float64 { return time.Since(time.Unix(0, th.lastNs.Load())).Seconds() })
	if err := n.Register(since, th.failing, stepdowns); err != nil {
		return fmt.Errorf("node: term health metrics: %w", err)
	}
	return nil
}

// stop ends the prober.
func (th *termHealth) stop() {
	th.cancel()
	<-th.done
}
