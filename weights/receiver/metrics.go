package receiver

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the receiver's Prometheus series; all no-ops when
// Config.Registerer is nil.
type metrics struct {
	version      prometheus.Gauge
	applied      prometheus.Counter
	rejected     prometheus.Counter
	resets       prometheus.Counter
	appliedBytes prometheus.Counter
	skipped      prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		version: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "asyncrl_weights_receiver_version", Help: "Weight version the local copy holds."}),
		applied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "asyncrl_weights_receiver_versions_applied_total", Help: "Delta versions applied to the local copy."}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "asyncrl_weights_receiver_versions_rejected_total", Help: "Delta versions rejected (checksum mismatch or corrupt payload)."}),
		resets: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "asyncrl_weights_receiver_resets_total", Help: "Resets of the local copy from the base or a full checkpoint."}),
		appliedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "asyncrl_weights_receiver_compressed_bytes_applied_total", Help: "Compressed delta bytes applied."}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "asyncrl_weights_receiver_tensors_skipped_total", Help: "Delta tensors skipped because the local checkpoint lacks them (tied weights, buffers)."}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.version, m.applied, m.rejected, m.resets, m.appliedBytes, m.skipped} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
