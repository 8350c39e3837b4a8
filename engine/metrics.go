package engine

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/asyncrl/asyncrl/engine/latency"
)

// metrics mimics vLLM's names so dashboards and the router's scraper work
// unchanged against either engine. Gauges and counters read the core under
// the engine lock at scrape time; latencies are MODELLED seconds (queueing
// and step costs of the latency core, independent of TimeScale).
type metrics struct {
	ttft prometheus.Histogram
	e2e  prometheus.Histogram
	// unauthorized counts requests refused for a missing or wrong API
	// key; refusedPaths weight loads refused outside the weight roots.
	unauthorized, refusedPaths prometheus.Counter
}

func newMetrics(e *Engine) (*metrics, error) {
	labels := prometheus.Labels{"model_name": e.cfg.ServedModelName}
	stats := func(f func(latency.Stats) float64) func() float64 {
		return func() float64 {
			e.mu.Lock()
			defer e.mu.Unlock()
			return f(e.core.Stats())
		}
	}
	m := &metrics{
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "vllm:time_to_first_token_seconds", Help: "Modelled time to first token.",
			ConstLabels: labels,
			Buckets:     []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80},
		}),
		e2e: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "vllm:e2e_request_latency_seconds", Help: "Modelled end-to-end sequence latency.",
			ConstLabels: labels,
			Buckets:     []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960},
		}),
	}
	m.unauthorized = prometheus.NewCounter(prometheus.CounterOpts{Name: "asyncrl_engine_unauthorized_requests_total",
		Help: "Requests refused with 401: no or a wrong API key.", ConstLabels: labels})
	m.refusedPaths = prometheus.NewCounter(prometheus.CounterOpts{Name: "asyncrl_engine_refused_weight_paths_total",
		Help: "Weight and LoRA loads refused because the path is outside the weight roots.", ConstLabels: labels})
	cs := []prometheus.Collector{
		m.ttft, m.e2e, m.unauthorized, m.refusedPaths,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vllm:num_requests_running", Help: "Sequences in the running batch.", ConstLabels: labels},
			stats(func(s latency.Stats) float64 { return float64(s.Running) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vllm:num_requests_waiting", Help: "Sequences waiting (queued or held by a pause).", ConstLabels: labels},
			func() float64 {
				e.mu.Lock()
				defer e.mu.Unlock()
				return float64(e.core.Stats().Waiting + len(e.held))
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vllm:kv_cache_usage_perc", Help: "KV-cache usage, 0-1 (referenced blocks / capacity).", ConstLabels: labels},
			stats(func(s latency.Stats) float64 { return s.KVUsage })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "vllm:prefix_cache_queries_total", Help: "Prompt tokens looked up in the prefix cache.", ConstLabels: labels},
			stats(func(s latency.Stats) float64 { return float64(s.PrefixQueries) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "vllm:prefix_cache_hits_total", Help: "Prompt tokens found in the prefix cache.", ConstLabels: labels},
			stats(func(s latency.Stats) float64 { return float64(s.PrefixHits) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "vllm:generation_tokens_total", Help: "Generated tokens.", ConstLabels: labels},
			stats(func(s latency.Stats) float64 { return float64(s.GenerationTokens) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "vllm:prompt_tokens_total", Help: "Prompt tokens of accepted sequences.", ConstLabels: labels},
			func() float64 {
				e.mu.Lock()
				defer e.mu.Unlock()
				return float64(e.prompts)
			}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "vllm:num_preemptions_total", Help: "Sequences preempted for lack of KV blocks.", ConstLabels: labels},
			stats(func(s latency.Stats) float64 { return float64(s.Preemptions) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "asyncrl_engine_weight_version", Help: "Weight version being served.", ConstLabels: labels},
			func() float64 {
				e.mu.Lock()
				defer e.mu.Unlock()
				return float64(e.version)
			}),
	}
	for _, c := range cs {
		if err := e.reg.Register(c); err != nil {
			return nil, fmt.Errorf("engine: register metrics: %w", err)
		}
	}
	return m, nil
}
