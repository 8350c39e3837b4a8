package node

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// registerMetrics adds the loop's figures to reg as functions evaluated at
// scrape time from thread-safe snapshots (trainer steps, the ledger, the
// rollout counters, engine versions); the actor shells and the router add
// their own asyncrl_actor_* and router metrics to the same registry.
func (n *Node) registerMetrics(reg prometheus.Registerer) error {
	lastStep := func() (step, version int64, reward float64) {
		l, ok := n.lastStep()
		if !ok {
			return 0, 0, 0
		}
		return l.Step, l.Version, l.RewardMean
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
	}
	cs := []prometheus.Collector{
		counter("asyncrl_loop_steps_total", "Trainer steps completed.", func() float64 { s, _, _ := lastStep(); return float64(s) }),
		gauge("asyncrl_loop_policy_version", "Policy version produced by the last step.", func() float64 { _, v, _ := lastStep(); return float64(v) }),
		gauge("asyncrl_loop_reward_mean", "Mean trajectory reward of the last trained mini-batch.", func() float64 { _, _, r := lastStep(); return r }),
		counter("asyncrl_loop_groups_kept_total", "Groups the dynamic-sampling filter kept.", func() float64 { k, _, _, _ := n.ledger.counts(); return float64(k) }),
		counter("asyncrl_loop_groups_dropped_total", "Groups the dynamic-sampling filter dropped.", func() float64 { _, d, _, _ := n.ledger.counts(); return float64(d) }),
		gauge("asyncrl_loop_staleness_max", "Largest staleness (steps) of a group accepted for training.", func() float64 { _, _, _, s := n.ledger.counts(); return float64(s) }),
		counter("asyncrl_rollout_trajectories_started_total", "Trajectories started by rollout actors.", func() float64 { return float64(n.rolloutTotals().Started) }),
		counter("asyncrl_rollout_trajectories_finished_total", "Trajectories finished.", func() float64 { return float64(n.rolloutTotals().Finished) }),
		counter("asyncrl_rollout_trajectories_aborted_total", "Trajectories aborted (their prompts are requeued).", func() float64 { return float64(n.rolloutTotals().Aborted) }),
		counter("asyncrl_rollout_tokens_total", "Tokens of finished trajectories (prompt, generated, observations).", func() float64 { return float64(n.rolloutTotals().Tokens) }),
		counter("asyncrl_rollout_turn_resubmits_total", "Generation calls that continued a turn after a failure or an abort.", func() float64 { return float64(n.rolloutTotals().Resubmits) }),
	}
	for i, e := range n.engines {
		e := e
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "asyncrl_engine_weight_version",
			Help: "Policy version a built-in engine serves.", ConstLabels: prometheus.Labels{"engine": strconv.Itoa(i)}},
			func() float64 { return float64(e.E.Version()) }))
	}
	if n.bus != nil {
		// asyncrl_bus_slow_consumer_dropped_total: what a subscription lost
		// past its pending limits while its handler waited.
		cs = append(cs, n.bus.Collectors()...)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("node: metrics: %w", err)
		}
	}
	return nil
}

// serveMetrics serves reg on addr (metrics.listen) until Stop.
func (n *Node) serveMetrics(addr string, reg *prometheus.Registry) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("node: metrics listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	n.metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	n.metricsURL = "http://" + ln.Addr().String() + "/metrics"
	go func() { _ = n.metricsSrv.Serve(ln) }()
	return nil
}

func (n *Node) stopMetrics(ctx context.Context) {
	if n.metricsSrv != nil {
		_ = n.metricsSrv.Shutdown(ctx)
	}
}

// MetricsURL is the /metrics URL when metrics.listen is set.
func (n *Node) MetricsURL() string { return n.metricsURL }
