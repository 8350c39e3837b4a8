package weightsync

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/asyncrl/asyncrl/config"
	pol "github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/weights/quant"
	"github.com/asyncrl/asyncrl/weights/quantdir"
)

// SchemeFor is publisher.quantize's scheme, nil for none.
func SchemeFor(cfg config.Config) (quant.Scheme, error) {
	if cfg.Publisher.Quantize == config.QuantizeNone || cfg.Publisher.Quantize == "" {
		return nil, nil
	}
	s, err := quant.Lookup(string(cfg.Publisher.Quantize))
	if err != nil {
		return nil, fmt.Errorf("publisher.quantize: %w", err)
	}
	return s, nil
}

// saveServing writes m's serving checkpoint into dir: BF16, or quantised
// by s (then the error against m's weights is returned, ok true).
func saveServing(m *pol.Model, dir string, s quant.Scheme) (st quant.Stats, ok bool, err error) {
	if s == nil {
		return st, false, m.SaveServing(dir)
	}
	st, err = m.SaveServingQuantized(dir, s, nil)
	return st, true, err
}

// quantMetrics are the asyncrl_publish_quant_* metrics: the error of the
// newest published version's served weights against the trainer's
// masters, and the time quantising and writing it took.
type quantMetrics struct {
	maxAbs, maxRel, rms prometheus.Gauge
	seconds             prometheus.Histogram
}

func newQuantMetrics() *quantMetrics {
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	return &quantMetrics{
		maxAbs: g("asyncrl_publish_quant_max_abs_error", "Largest |served − master| over the quantised weights of the newest published version."),
		maxRel: g("asyncrl_publish_quant_max_rel_error", "Largest |served − master|/|master| over the quantised weights of the newest version whose scaled value is in E4M3's normal range (bound 2^-4)."),
		rms:    g("asyncrl_publish_quant_rms_error", "Root-mean-square served − master error over the quantised weights of the newest published version."),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "asyncrl_publish_quant_seconds",
			Help: "Time to quantise and write one version's serving checkpoint.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
	}
}

func (q *quantMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{q.maxAbs, q.maxRel, q.rms, q.seconds}
}

// observeQuant records version's quantisation error and logs it.
func (w *Sync) observeQuant(version int64, st quant.Stats, d time.Duration) {
	w.quant.maxAbs.Set(st.MaxAbs)
	w.quant.maxRel.Set(st.MaxRel)
	w.quant.rms.Set(st.RMS())
	w.quant.seconds.Observe(d.Seconds())
	w.log.Info().Int64("version", version).Str("quantize", w.c.Quantize.Name()).Float64("quant_max_abs", st.MaxAbs).
		Float64("quant_max_rel", st.MaxRel).Float64("quant_rms", st.RMS()).Int64("quant_elements", st.N).Dur("quant_time", d).
		Msg("publisher: version quantised")
}

// save writes m as version's serving checkpoint in dir (quantised when
// publisher.quantize says so).
func (w *Sync) save(m *pol.Model, dir string, version int64) error {
	t0 := time.Now()
	st, quantised, err := saveServing(m, dir, w.c.Quantize)
	if err != nil {
		return err
	}
	if quantised {
		w.observeQuant(version, st, time.Since(t0))
	}
	return nil
}

// requantize turns a trainer's BF16 serving checkpoint in dir (a remote
// trainer's or an exec child's) into the quantised one the engines load,
// written to the stage directory (the trainer's dir is left alone); it
// returns that directory. The built-in policy is loaded and written
// quantised (model.SaveServingQuantized); a Hugging Face architecture is
// quantised file to file with vLLM's choice of tensors (weights/quantdir).
func (w *Sync) requantize(dir string, version int64) (string, error) {
	out := filepath.Join(w.c.Stage, fmt.Sprintf("v%08d", version))
	mt, err := pol.ReadModelType(dir)
	if err != nil {
		return "", fmt.Errorf("node: publisher: version %d: %w", version, err)
	}
	if mt != pol.ModelType {
		t0 := time.Now()
		_ = os.RemoveAll(out)
		st, err := quantdir.Quantize(dir, out, w.c.Quantize)
		if err != nil {
			_ = os.RemoveAll(out)
			return "", fmt.Errorf("node: publisher: version %d: %w", version, err)
		}
		w.observeQuant(version, st, time.Since(t0))
		return out, nil
	}
	m, err := pol.LoadServing(dir)
	if err != nil {
		return "", fmt.Errorf("node: publisher: version %d: %w", version, err)
	}
	if err := w.save(m, out, version); err != nil {
		return "", fmt.Errorf("node: publisher: version %d: %w", version, err)
	}
	return out, nil
}
