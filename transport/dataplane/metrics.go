package dataplane

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/asyncrl/asyncrl/messages"
)

// Instrument wraps b so every Publish and Fetch is counted on reg:
//
//	asyncrl_dataplane_fetches_total{backend,outcome}   outcome: ok, checksum, incomplete,
//	                                                   unknown_transfer, bad_plan, unavailable,
//	                                                   not_implemented, error
//	asyncrl_dataplane_fetch_bytes_total{backend}       verified bytes received
//	asyncrl_dataplane_fetch_reconnects_total{backend}  broken connections resumed
//	asyncrl_dataplane_fetch_seconds{backend}           Fetch duration
//	asyncrl_dataplane_offers_open{backend}             published, not yet closed
//
// Several wrapped backends (or processes' components) may share reg: the
// collectors are registered once and shared.
func Instrument(b Backend, reg prometheus.Registerer) (Backend, error) {
	m, err := sharedMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &instrumented{Backend: b, m: m, name: b.Name()}, nil
}

type metrics struct {
	fetches    *prometheus.CounterVec
	bytes      *prometheus.CounterVec
	reconnects *prometheus.CounterVec
	seconds    *prometheus.HistogramVec
	open       *prometheus.GaugeVec
}

func sharedMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		fetches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "asyncrl_dataplane_fetches_total",
			Help: "Data-plane fetches by backend and outcome.",
		}, []string{"backend", "outcome"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "asyncrl_dataplane_fetch_bytes_total",
			Help: "Bytes received and verified by data-plane fetches.",
		}, []string{"backend"}),
		reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "asyncrl_dataplane_fetch_reconnects_total",
			Help: "Broken connections data-plane fetches resumed from.",
		}, []string{"backend"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "asyncrl_dataplane_fetch_seconds",
			Help:    "Duration of data-plane fetches.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10), // 1 ms .. ~4.4 min
		}, []string{"backend"}),
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "asyncrl_dataplane_offers_open",
			Help: "Published transfers whose Offer is not closed yet.",
		}, []string{"backend"}),
	}
	if reg == nil {
		return m, nil
	}
	if err := register(reg, &m.fetches); err != nil {
		return nil, err
	}
	if err := register(reg, &m.bytes); err != nil {
		return nil, err
	}
	if err := register(reg, &m.reconnects); err != nil {
		return nil, err
	}
	if err := register(reg, &m.seconds); err != nil {
		return nil, err
	}
	if err := register(reg, &m.open); err != nil {
		return nil, err
	}
	return m, nil
}

// register adds *c to reg, or swaps in the collector already registered
// under the same name so instrumented backends share counters.
func register[C prometheus.Collector](reg prometheus.Registerer, c *C) error {
	err := reg.Register(*c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			*c = existing
			return nil
		}
	}
	return err
}

type instrumented struct {
	Backend
	m    *metrics
	name string
}

func (i *instrumented) Publish(ctx context.Context, p *messages.TransferPlan, src io.ReaderAt) (Offer, error) {
	o, err := i.Backend.Publish(ctx, p, src)
	if err != nil {
		return nil, err
	}
	g := i.m.open.WithLabelValues(i.name)
	g.Inc()
	return &countedOffer{Offer: o, dec: g.Dec}, nil
}

func (i *instrumented) Fetch(ctx context.Context, p *messages.TransferPlan, dst io.WriterAt) (Result, error) {
	start := time.Now()
	res, err := i.Backend.Fetch(ctx, p, dst)
	i.m.seconds.WithLabelValues(i.name).Observe(time.Since(start).Seconds())
	i.m.fetches.WithLabelValues(i.name, Outcome(err)).Inc()
	i.m.bytes.WithLabelValues(i.name).Add(float64(res.Bytes))
	i.m.reconnects.WithLabelValues(i.name).Add(float64(res.Reconnects))
	return res, err
}

// Outcome names err for metrics and logs: "ok" for nil, else the sentinel
// it wraps, "error" for anything else.
func Outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrChecksum):
		return "checksum"
	case errors.Is(err, ErrUnknownTransfer):
		return "unknown_transfer"
	case errors.Is(err, ErrBadPlan):
		return "bad_plan"
	case errors.Is(err, ErrNotImplemented):
		return "not_implemented"
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	case errors.Is(err, ErrIncomplete):
		return "incomplete"
	}
	return "error"
}

type countedOffer struct {
	Offer
	once sync.Once
	dec  func()
}

func (o *countedOffer) Close() error {
	o.once.Do(o.dec)
	return o.Offer.Close()
}
