package guard

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	requests       prometheus.Counter
	refusedBy      map[string]prometheus.Counter // pre-resolved by reason
	refusedVec     *prometheus.CounterVec
	upstreamErrors prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "asyncrl_engine_guard_requests_total", Help: "Requests the engine guard received (refused ones included).",
		}),
		refusedVec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "asyncrl_engine_guard_refused_total", Help: "Requests the engine guard refused with 401, by reason (no_key, not_bearer, wrong_key).",
		}, []string{"reason"}),
		upstreamErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "asyncrl_engine_guard_upstream_errors_total", Help: "Requests the engine did not answer (502 to the caller, or a stream cut).",
		}),
		refusedBy: map[string]prometheus.Counter{},
	}
	for _, r := range []string{ReasonNoKey, ReasonNotBearer, ReasonWrongKey} {
		m.refusedBy[r] = m.refusedVec.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.refusedVec, m.upstreamErrors} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("guard: metrics already registered (one guard per registry): %w", err)
			}
			return nil, fmt.Errorf("guard: registering metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) refused(reason string) { m.refusedBy[reason].Inc() }
