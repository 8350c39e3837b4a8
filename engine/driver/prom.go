package driver

import (
	"bytes"
	"fmt"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// parsePrometheus reads Prometheus text exposition into name → value,
// summing a metric's series over their labels (vLLM labels every series
// with model_name and engine; one server's totals are what the drivers
// want). Histograms and summaries report their sample count under
// name+"_count" and their sum under name+"_sum".
func parsePrometheus(data []byte) (map[string]float64, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("parsing Prometheus text: %w", err)
	}
	out := make(map[string]float64, len(families))
	for name, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[name] += m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[name] += m.GetGauge().GetValue()
			case dto.MetricType_UNTYPED:
				out[name] += m.GetUntyped().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[name+"_count"] += float64(m.GetHistogram().GetSampleCount())
				out[name+"_sum"] += m.GetHistogram().GetSampleSum()
			case dto.MetricType_SUMMARY:
				out[name+"_count"] += float64(m.GetSummary().GetSampleCount())
				out[name+"_sum"] += m.GetSummary().GetSampleSum()
			}
		}
	}
	return out, nil
}
