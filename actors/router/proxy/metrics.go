package proxy

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/asyncrl/asyncrl/actors/router/policy"
)

type metrics struct {
	requests  *prometheus.CounterVec // replica, code
	errors    *prometheus.CounterVec // replica, kind
	retries   *prometheus.CounterVec // reason
	decisions *prometheus.CounterVec // outcome
	overhead  prometheus.Histogram

	// Pre-resolved children for the per-request counters, so the hot
	// path skips the label hashing and strconv of WithLabelValues.
	decisionBy [256]prometheus.Counter // by policy.Outcome
	requestBy  sync.Map                // requestKey → prometheus.Counter
}

type requestKey struct {
	replica string
	code    int
}

// request counts one answer of replica with status code.
func (m *metrics) request(replica string, code int) {
	k := requestKey{replica, code}
	if c, ok := m.requestBy.Load(k); ok {
		c.(prometheus.Counter).Inc()
		return
	}
	c, _ := m.requestBy.LoadOrStore(k, m.requests.WithLabelValues(replica, strconv.Itoa(code)))
	c.(prometheus.Counter).Inc()
}

// decision counts one routing decision.
func (m *metrics) decision(o policy.Outcome) {
	if c := m.decisionBy[o]; c != nil {
		c.Inc()
		return
	}
	m.decisions.WithLabelValues(o.String()).Inc()
}

func newMetrics(reg prometheus.Registerer, r *Router) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "asyncrl_router_requests_total", Help: "Proxied requests by replica and HTTP status code.",
		}, []string{"replica", "code"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "asyncrl_router_errors_total", Help: "Requests that failed in the router or upstream, by kind.",
		}, []string{"replica", "kind"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "asyncrl_router_retries_total", Help: "Retries to a different replica, by reason (connect, status_503).",
		}, []string{"reason"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "asyncrl_router_decisions_total", Help: "Routing decisions by outcome.",
		}, []string{"outcome"}),
		overhead: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "asyncrl_router_overhead_seconds",
			Help:    "Time spent in the router per request, excluding waiting on the upstream.",
			Buckets: prometheus.ExponentialBuckets(5e-6, 2, 16),
		}),
	}
	for _, o := range policy.Outcomes {
		m.decisionBy[o] = m.decisions.WithLabelValues(o.String())
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.errors, m.retries, m.decisions, m.overhead, (*coreCollector)(r)} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

var (
	descInflightReqs = prometheus.NewDesc("asyncrl_router_inflight_requests", "Requests in flight per replica.", []string{"replica"}, nil)
	descInflightToks = prometheus.NewDesc("asyncrl_router_inflight_tokens", "Prompt + expected decode tokens in flight per replica.", []string{"replica"}, nil)
	descSessions     = prometheus.NewDesc("asyncrl_router_sessions", "Active sessions per replica.", []string{"replica"}, nil)
	descHealthy      = prometheus.NewDesc("asyncrl_router_replica_healthy", "1 if the replica is healthy.", []string{"replica"}, nil)
)

// coreCollector reads the per-replica gauges from the core at scrape time,
// so they can never drift from the core's own bookkeeping.
type coreCollector Router

func (c *coreCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descInflightReqs
	ch <- descInflightToks
	ch <- descSessions
	ch <- descHealthy
}

func (c *coreCollector) Collect(ch chan<- prometheus.Metric) {
	for _, v := range (*Router)(c).Replicas() {
		ch <- prometheus.MustNewConstMetric(descInflightReqs, prometheus.GaugeValue, float64(v.InflightRequests), v.URL)
		ch <- prometheus.MustNewConstMetric(descInflightToks, prometheus.GaugeValue, float64(v.InflightTokens), v.URL)
		ch <- prometheus.MustNewConstMetric(descSessions, prometheus.GaugeValue, float64(v.Sessions), v.URL)
		h := 0.0
		if v.Healthy {
			h = 1
		}
		ch <- prometheus.MustNewConstMetric(descHealthy, prometheus.GaugeValue, h, v.URL)
	}
}
