package actors

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// shellMetrics are the counters every shell and bridge keeps, labelled by
// actor name.
type shellMetrics struct {
	dropped     *prometheus.CounterVec
	waits       *prometheus.CounterVec
	waitSeconds *prometheus.CounterVec
	overflow    *prometheus.CounterVec
	decodeErr   *prometheus.CounterVec
	restarts    *prometheus.CounterVec
	escalated   *prometheus.CounterVec
	sendErr     *prometheus.CounterVec
	panics      *prometheus.CounterVec
}

func newShellMetrics(reg prometheus.Registerer) (*shellMetrics, error) {
	m := &shellMetrics{
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "asyncrl_actor_mailbox_dropped_total",
			Help: "Messages refused because the actor's mailbox was full.",
		}, []string{"actor"}),
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "asyncrl_actor_mailbox_waits_total",
			Help: "Bus messages a subject bridge held back until the actor's full mailbox had room (nothing lost).",
		}, []string{"actor"}),
		waitSeconds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "asyncrl_actor_mailbox_wait_seconds_total",
			Help: "Seconds subject bridges spent waiting for room in the actor's full mailbox.",
		}, []string{"actor"}),
		overflow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "asyncrl_actor_mailbox_overflow_total",
			Help: "Bus messages admitted over the mailbox bound because the bus ran the bridge on the publisher's goroutine (waiting could deadlock).",
		}, []string{"actor"}),
		decodeErr: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "asyncrl_actor_decode_errors_total",
			Help: "Bus payloads a bridge could not decode (dropped, or acked if durable).",
		}, []string{"actor", "subject"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "asyncrl_actor_restarts_total",
			Help: "Restarts of an actor after its core panicked.",
		}, []string{"actor"}),
		escalated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "asyncrl_actor_escalations_total",
			Help: "Times an actor failed too often and was stopped and escalated.",
		}, []string{"actor"}),
		sendErr: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "asyncrl_actor_send_errors_total",
			Help: "Send effects the shell's Sender failed to deliver.",
		}, []string{"actor"}),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "asyncrl_actor_panics_total",
			Help: "Panics raised by an actor's core.",
		}, []string{"actor"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []**prometheus.CounterVec{&m.dropped, &m.waits, &m.waitSeconds, &m.overflow, &m.decodeErr, &m.restarts, &m.escalated, &m.sendErr, &m.panics} {
		if err := reg.Register(*c); err != nil {
			// A second System on the same registry shares the counters.
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
					*c = existing
					continue
				}
			}
			return nil, fmt.Errorf("actors: register metrics: %w", err)
		}
	}
	return m, nil
}

// MetricSink applies a core's Metric effects. The shell calls it from the
// actor goroutine only, but one sink is usually shared by many actors.
type MetricSink interface {
	Apply(m Metric) error
}

// MetricDef declares one metric a PromSink accepts.
type MetricDef struct {
	// Name is the full metric name, prefixed asyncrl_.
	Name string
	// Help is the metric's help text.
	Help string
	// Kind is CounterAdd for a counter, GaugeSet or GaugeAdd for a gauge,
	// Observe for a histogram.
	Kind MetricKind
	// Labels are the label names; Metric.LabelValues must match them.
	Labels []string
	// Buckets of a histogram; nil means prometheus.DefBuckets.
	Buckets []float64
}

// PromSink is a MetricSink backed by prometheus collectors declared up front,
// so a typo in a core's metric name is an error, not a new time series.
type PromSink struct {
	// byName is written only by NewPromSink, so Apply needs no lock.
	byName map[string]promMetric
}

type promMetric struct {
	kind      MetricKind
	counter   *prometheus.CounterVec
	gauge     *prometheus.GaugeVec
	histogram *prometheus.HistogramVec
}

var _ MetricSink = (*PromSink)(nil)

// ErrUnknownMetric is returned by PromSink.Apply for an undeclared name or a
// kind that does not match the declaration.
var ErrUnknownMetric = errors.New("actors: unknown metric")

// NewPromSink registers defs on reg (nil registers nothing, for tests).
func NewPromSink(reg prometheus.Registerer, defs ...MetricDef) (*PromSink, error) {
	s := &PromSink{byName: map[string]promMetric{}}
	for _, d := range defs {
		var c prometheus.Collector
		pm := promMetric{kind: d.Kind}
		switch d.Kind {
		case CounterAdd:
			pm.counter = prometheus.NewCounterVec(prometheus.CounterOpts{Name: d.Name, Help: d.Help}, d.Labels)
			c = pm.counter
		case GaugeSet, GaugeAdd:
			pm.gauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: d.Name, Help: d.Help}, d.Labels)
			c = pm.gauge
		case Observe:
			pm.histogram = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: d.Name, Help: d.Help, Buckets: d.Buckets}, d.Labels)
			c = pm.histogram
		default:
			return nil, fmt.Errorf("actors: metric %q: Kind must be CounterAdd, GaugeSet, GaugeAdd or Observe, got %d", d.Name, d.Kind)
		}
		if _, dup := s.byName[d.Name]; dup {
			return nil, fmt.Errorf("actors: metric %q declared twice", d.Name)
		}
		if reg != nil {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("actors: register metric %q: %w", d.Name, err)
			}
		}
		s.byName[d.Name] = pm
	}
	return s, nil
}

// Apply carries out one metric update.
func (s *PromSink) Apply(m Metric) error {
	pm, ok := s.byName[m.Name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownMetric, m.Name)
	}
	switch {
	case m.Kind == CounterAdd && pm.kind == CounterAdd:
		c, err := pm.counter.GetMetricWithLabelValues(m.LabelValues...)
		if err != nil {
			return fmt.Errorf("actors: metric %q: %w", m.Name, err)
		}
		if m.Value < 0 {
			return fmt.Errorf("actors: metric %q: counter decrease %v", m.Name, m.Value)
		}
		c.Add(m.Value)
	case (m.Kind == GaugeSet || m.Kind == GaugeAdd) && pm.gauge != nil:
		g, err := pm.gauge.GetMetricWithLabelValues(m.LabelValues...)
		if err != nil {
			return fmt.Errorf("actors: metric %q: %w", m.Name, err)
		}
		if m.Kind == GaugeSet {
			g.Set(m.Value)
		} else {
			g.Add(m.Value)
		}
	case m.Kind == Observe && pm.kind == Observe:
		h, err := pm.histogram.GetMetricWithLabelValues(m.LabelValues...)
		if err != nil {
			return fmt.Errorf("actors: metric %q: %w", m.Name, err)
		}
		h.Observe(m.Value)
	default:
		return fmt.Errorf("%w: %q used as kind %d", ErrUnknownMetric, m.Name, m.Kind)
	}
	return nil
}
