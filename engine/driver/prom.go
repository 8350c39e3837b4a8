package driver

import (
	"bytes"
	"fmt"
	"math"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// promSamples is one Prometheus text exposition read by metric name: the
// sum of a metric's series over their labels (one server's totals) and
// their maximum (for a ratio gauge such as KV-cache usage the fullest
// series binds: vLLM labels one per engine core, SGLang one per DP rank,
// and a sum of ratios would exceed 1).
type promSamples struct {
	sum, max map[string]float64
}

// parseSamples reads Prometheus text exposition by metric name: the sum
// of each metric's series over their labels and their maximum.
// Histograms and summaries report their sample count under name+"_count"
// and their sum under name+"_sum".
func parseSamples(data []byte) (promSamples, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(data))
	if err != nil {
		return promSamples{}, fmt.Errorf("parsing Prometheus text: %w", err)
	}
	s := promSamples{sum: make(map[string]float64, len(families)), max: make(map[string]float64, len(families))}
	add := func(name string, v float64) {
		if old, ok := s.max[name]; !ok || v > old {
			s.max[name] = v
		}
		s.sum[name] += v
	}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				add(name, m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				add(name, m.GetGauge().GetValue())
			case dto.MetricType_UNTYPED:
				add(name, m.GetUntyped().GetValue())
			case dto.MetricType_HISTOGRAM:
				add(name+"_count", float64(m.GetHistogram().GetSampleCount()))
				add(name+"_sum", m.GetHistogram().GetSampleSum())
			case dto.MetricType_SUMMARY:
				add(name+"_count", float64(m.GetSummary().GetSampleCount()))
				add(name+"_sum", m.GetSummary().GetSampleSum())
			}
		}
	}
	return s, nil
}

// The load gauges each kind reports: the waiting-queue length and the
// KV-cache usage fraction. vLLM: vllm/v1/metrics/loggers.py; vLLM before
// v0.10 named the usage vllm:gpu_cache_usage_perc. SGLang:
// python/sglang/srt/metrics/collector.py (SchedulerMetricsCollector,
// sgl-project/sglang@0025436eab0556737d615b36a4dd3e1e26e82f3d), with
// --enable-metrics.
var (
	queueGauges = []string{"vllm:num_requests_waiting", "sglang:num_queue_reqs"}
	kvGauges    = []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"}
)

// metricsKind says which engine kind wrote a Prometheus text: SGLang when
// any sglang:* metric is present, else vLLM (the built-in engine writes
// vLLM's names).
func metricsKind(sum map[string]float64) Kind {
	for name := range sum {
		if strings.HasPrefix(name, "sglang:") {
			return KindSGLang
		}
	}
	return KindVLLM
}

// metricsFrom maps samples onto Metrics by the kind's names, with the
// KV-cache usage taken as the maximum over series.
func metricsFrom(kind Kind, s promSamples) Metrics {
	var m Metrics
	if kind == KindSGLang {
		m = sglangMetrics(s.sum)
	} else {
		m = vllmMetrics(s.sum)
	}
	for _, name := range kvGauges {
		if v, ok := s.max[name]; ok {
			m.KVCacheUsage = v
			break
		}
	}
	for _, name := range append(queueGauges, kvGauges...) {
		if v, ok := s.sum[name]; ok && !math.IsNaN(v) {
			m.HasLoad = true
		}
	}
	return m
}

// ParseMetrics reads one engine's GET /metrics answer (Prometheus text)
// into Metrics, whichever kind wrote it (vLLM, the built-in engine or
// SGLang: told apart by their metric names). Series of one metric are
// summed over their labels, except the KV-cache usage, whose fullest
// series is taken. HasLoad is false when the text holds none of the load
// gauges (an engine without metrics enabled, or another exporter). This
// is the one parser of engine metrics: the drivers' Metrics and the
// router's load scrape both use it.
func ParseMetrics(data []byte) (Metrics, error) {
	s, err := parseSamples(data)
	if err != nil {
		return Metrics{}, err
	}
	return metricsFrom(metricsKind(s.sum), s), nil
}
