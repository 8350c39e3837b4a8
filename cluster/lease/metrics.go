package lease

import (
	"errors"
	"fmt"

	"github.com/asyncrl/asyncrl/cluster/lease/contender"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics of one elector; labelled with its role and holder so several
// electors can share a registry.
type metrics struct {
	leader   prometheus.Gauge
	acquired prometheus.Counter
	lost     prometheus.Counter
	failures prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, role, holder string) (*metrics, error) {
	labels := prometheus.Labels{"role": role, "holder": holder}
	m := &metrics{
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "asyncrl_lease_leader", ConstLabels: labels,
			Help: "1 while this contender holds the lease of its role, else 0."}),
		acquired: prometheus.NewCounter(prometheus.CounterOpts{Name: "asyncrl_lease_acquired_total", ConstLabels: labels,
			Help: "Terms won (leases acquired)."}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{Name: "asyncrl_lease_lost_total", ConstLabels: labels,
			Help: "Terms that ended other than by resigning (renewal refused or local deadline passed)."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "asyncrl_lease_call_failures_total", ConstLabels: labels,
			Help: "KV calls that failed transiently (timeouts, lost connection) and were retried."}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.leader, m.acquired, m.lost, m.failures} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("%w: metrics for role %s holder %s already registered (one elector per role and holder)", contender.ErrBadConfig, role, holder)
			}
			return nil, fmt.Errorf("lease: register metrics: %w", err)
		}
	}
	return m, nil
}
