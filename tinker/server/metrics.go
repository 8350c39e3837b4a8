package server

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

type metrics struct {
	requests        *prometheus.CounterVec
	latency         *prometheus.HistogramVec
	retrieve        prometheus.Histogram
	trainSubmitted  *prometheus.CounterVec
	trainDone       *prometheus.CounterVec
	samplesDone     *prometheus.CounterVec
	samplesRefused  prometheus.Counter
	sessionsExpired prometheus.Counter
	recovered       prometheus.Counter
	samplerVersion  prometheus.Gauge
}

func newMetrics(reg *prometheus.Registry, s *Server) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "asyncrl_tinker_requests_total",
			Help: "Tinker API requests by route and status code."}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "asyncrl_tinker_request_seconds",
			Help:    "Tinker API request handling time by route (retrieve_future includes its long poll).",
			Buckets: prometheus.ExponentialBuckets(1e-4, 4, 10)}, []string{"route"}),
		retrieve: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "asyncrl_tinker_retrieve_future_seconds",
			Help: "retrieve_future time, long poll included.", Buckets: prometheus.ExponentialBuckets(1e-4, 4, 10)}),
		trainSubmitted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "asyncrl_tinker_train_requests_total",
			Help: "Training futures created by operation."}, []string{"op"}),
		trainDone: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "asyncrl_tinker_train_finished_total",
			Help: "Training futures finished by operation and state (done, failed)."}, []string{"op", "state"}),
		samplesDone: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "asyncrl_tinker_samples_finished_total",
			Help: "Sample futures finished (ok true/false)."}, []string{"ok"}),
		samplesRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "asyncrl_tinker_samples_refused_total",
			Help: "asample calls refused with 429 because tinker.sample_queue was full."}),
		sessionsExpired: prometheus.NewCounter(prometheus.CounterOpts{Name: "asyncrl_tinker_sessions_expired_total",
			Help: "Sessions closed after tinker.session_timeout without a heartbeat."}),
		recovered: prometheus.NewCounter(prometheus.CounterOpts{Name: "asyncrl_tinker_futures_recovered_failed_total",
			Help: "Training futures a previous server left pending, marked failed at start."}),
		samplerVersion: prometheus.NewGauge(prometheus.GaugeOpts{Name: "asyncrl_tinker_sampler_version",
			Help: "The weight version the last published sampler checkpoint got (tinker.sampler_weights: version; 0 otherwise)."}),
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	locked := func(f func() float64) func() float64 {
		return func() float64 { s.mu.Lock(); defer s.mu.Unlock(); return f() }
	}
	reg.MustRegister(m.requests, m.latency, m.retrieve, m.trainSubmitted, m.trainDone, m.samplesDone,
		m.samplesRefused, m.sessionsExpired, m.recovered, m.samplerVersion,
		gauge("asyncrl_tinker_futures_pending", "Futures not finished yet.", locked(func() float64 { return float64(s.core.Pending()) })),
		gauge("asyncrl_tinker_results_held", "Finished results held in memory.", locked(func() float64 { n, _ := s.core.Held(); return float64(n) })),
		gauge("asyncrl_tinker_results_held_bytes", "Bytes of finished results held in memory.", locked(func() float64 { _, b := s.core.Held(); return float64(b) })),
		gauge("asyncrl_tinker_results_evicted", "Finished results evicted (TTL or memory bound) so far.", locked(func() float64 { return float64(s.core.Evicted()) })),
		gauge("asyncrl_tinker_sessions", "Open sessions.", locked(func() float64 { return float64(s.core.Sessions()) })),
		gauge("asyncrl_tinker_models", "Loaded models.", locked(func() float64 { return float64(s.core.Models()) })),
		gauge("asyncrl_tinker_sample_queue", "Sample requests queued or running on the engines.", func() float64 { return float64(s.samples.queued()) }),
	)
	return m
}

func promHandler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}
