package node

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/asyncrl/asyncrl/cluster"
	"github.com/asyncrl/asyncrl/cluster/ckpt"
	"github.com/asyncrl/asyncrl/cluster/lease"
	"github.com/asyncrl/asyncrl/cluster/termwatch"
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
func termDeps(run, term string) []termDep {
	deps := []termDep{{stream: "KV_" + lease.DefaultBucket, lead: true},
		{stream: "groups-" + term, consumers: []string{"sampling"}, lead: true, term: true},
		{stream: "ledger-" + term, term: true}, {stream: "OBJ_asyncrl-weights-" + term, term: true}}
	for _, s := range []string{"KV_asyncrl_" + run + "_prompts", "KV_asyncrl_" + run + "_progress", "asyncrl_" + run + "_groupbuf",
		"OBJ_" + ckpt.Bucket(run), "KV_" + cluster.NamesBucket} {
		deps = append(deps, termDep{stream: s})
	}
	return deps
}

// ledgerWrites names the durable ledger's writes as a dependency of the
// term: a stream can answer probes while its writes time out.
const ledgerWrites = "durable ledger writes"

// probeResult is one probe of one dependency.
type probeResult struct {
	dep   string
	at    time.Time
	err   error
	moved []string
}

// errNoLeader: a replicated stream is electing its leader.
var errNoLeader = errors.New("no leader (electing)")

// keepLeaders probes the term's dependencies every interval and, on a
// clustered bus, moves their leaders to this node's server
// (natsbus.PreferLeader): the holder's own writes then never wait for an
// election when another node dies, and the lease outlives the loss of any
// server but its own. Results go to out (the term's loop owns the watch).
func (a *Agent) keepLeaders(ctx context.Context, deps []termDep, running *atomic.Bool, interval time.Duration, out chan<- probeResult) {
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
			select {
			case out <- probeResult{dep: d.stream, at: time.Now(), err: err, moved: h.Moved}:
			case <-ctx.Done():
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// termHealth is a term's watch and what it reports. The watch belongs to
// the term's loop (train); the prober only sends it results.
type termHealth struct {
	w       *termwatch.Watch
	probes  chan probeResult
	cancel  context.CancelFunc
	done    chan struct{}
	lastNs  atomic.Int64 // the watch's last step, for the gauge
	failing prometheus.Gauge
	// running: the term's pipeline started (its own streams exist).
	running atomic.Bool
}

// startTermHealth starts the term's watch and its prober.
func (a *Agent) startTermHealth(ctx context.Context, term string) (*termHealth, error) {
	now := time.Now()
	w, err := termwatch.New(termwatch.Config{StallAfter: a.cfg.StallAfter, UnhealthyAfter: a.cfg.UnhealthyAfter}, now)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAgentConfig, err)
	}
	th := &termHealth{w: w, probes: make(chan probeResult, 64), done: make(chan struct{}),
		failing: prometheus.NewGauge(prometheus.GaugeOpts{Name: "asyncrl_node_term_dependencies_failing",
			Help: "JetStream streams the trainer holder's term depends on that failed their last probe."})}
	th.lastNs.Store(now.UnixNano())
	pctx, cancel := context.WithCancel(ctx)
	th.cancel = cancel
	go func() {
		defer close(th.done)
		a.keepLeaders(pctx, termDeps(a.cfg.Run.Run.ID, term), &th.running, time.Second, th.probes)
	}()
	return th, nil
}

// register adds the term's health metrics (and the node's step-down
// count) to the term's registry.
func (th *termHealth) register(reg prometheus.Registerer, stepdowns prometheus.Collector) error {
	since := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "asyncrl_node_term_seconds_since_step",
		Help: "Seconds since the trainer holder's term last completed a step (it steps down at --stall-after)."},
		func() float64 { return time.Since(time.Unix(0, th.lastNs.Load())).Seconds() })
	for _, c := range []prometheus.Collector{since, th.failing, stepdowns} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("node: term health metrics: %w", err)
		}
	}
	return nil
}

// ledgerWrite reports a durable-ledger write's outcome to the watch (from
// the mirror's goroutine; dropped if the loop is behind: the next write
// reports again).
func (th *termHealth) ledgerWrite(err error) {
	select {
	case th.probes <- probeResult{dep: ledgerWrites, at: time.Now(), err: err}:
	default:
	}
}

// stop ends the prober.
func (th *termHealth) stop() {
	th.cancel()
	<-th.done
}

// stepDone tells the watch a step completed.
func (th *termHealth) stepDone(now time.Time) {
	th.w.StepDone(now)
	th.lastNs.Store(now.UnixNano())
}

// check feeds the probes that arrived to the watch and ticks it; the
// watch's events are printed, and a step-down is returned as
// ErrTermStalled (counted by reason).
func (a *Agent) checkTerm(th *termHealth, now time.Time) error {
	for n := len(th.probes); n > 0; n-- { // those queued now; later ones wait for the next tick
		r := <-th.probes
		th.w.Probe(r.at, r.dep, r.err)
		for _, m := range r.moved {
			what := "stream " + r.dep
			if m != "" {
				what = "consumer " + r.dep + "/" + m
			}
			a.event("leader of %s moved to %s", what, a.bus.ServerName())
		}
	}
	th.w.Tick(now)
	th.failing.Set(float64(len(th.w.Failing())))
	for _, e := range th.w.Ready() {
		a.event("%s", e)
	}
	if e, down := th.w.Down(); down {
		a.stepdowns.WithLabelValues(string(e.Reason)).Inc()
		return fmt.Errorf("%w (%s)", ErrTermStalled, e.Reason)
	}
	return nil
}
