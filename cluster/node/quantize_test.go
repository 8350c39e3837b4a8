package node

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/asyncrl/asyncrl/cluster/weightsync"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/weights/quant"
	"github.com/asyncrl/asyncrl/weights/receiver"
	"github.com/asyncrl/asyncrl/weights/safetensors"
)

// TestQuantizedPublish runs publisher.quantize fp8 through the whole
// node: every engine's weights copy (base + replayed deltas) is the FP8
// checkpoint of the last version — E4M3 weights with their scales — and
// loads to exactly the dequantised model of the trainer's published
// weights; the publisher's asyncrl_publish_quant_* metrics saw every
// version, with the relative error within E4M3's 2^-4.
func TestQuantizedPublish(t *testing.T) {
	cfg := smallConfig(t, 2)
	cfg.Publisher.Quantize = config.QuantizeFP8
	var mu sync.Mutex
	var last *model.Model
	n, s := runNodeWith(t, cfg, Options{InMemoryBus: true, AfterStep: func(_ context.Context, tr *model.Trainer, v int64) error {
		mu.Lock()
		defer mu.Unlock()
		if v == 2 {
			last = tr.ServingCopy() // what the trainer handed the publisher
		}
		return nil
	}}, nil)
	for _, v := range s.EngineVersions {
		if v != 2 {
			t.Fatalf("an engine serves version %d, want 2", v)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if last == nil {
		t.Fatal("no version 2")
	}
	fp8, _ := quant.Lookup("fp8")
	want, _, err := last.QuantizedCopy(fp8)
	if err != nil {
		t.Fatal(err)
	}
	dirs, _ := filepath.Glob(filepath.Join(weightsync.LayoutFor(cfg).Receivers, "*", receiver.WeightsDirName))
	if len(dirs) == 0 {
		t.Fatal("no receiver weights")
	}
	probe := []int32{1, 5, 9, 14}
	wl := make([]float32, want.VocabSize())
	want.NextLogits(probe, wl)
	for _, d := range dirs {
		ck, err := safetensors.OpenDir(d)
		if err != nil {
			t.Fatal(err)
		}
		info, err := ck.File("layers.0.weight")
		if err != nil {
			t.Fatal(err)
		}
		ti, _ := info.Info("layers.0.weight")
		_, scaleErr := info.Info("layers.0.weight_scale_inv")
		ck.Close()
		if ti.DType != safetensors.F8E4M3 || scaleErr != nil {
			t.Fatalf("%s: layers.0.weight is %s (scale: %v), want F8_E4M3 with weight_scale_inv", d, ti.DType, scaleErr)
		}
		got, err := model.LoadServing(d)
		if err != nil {
			t.Fatal(err)
		}
		gl := make([]float32, got.VocabSize())
		got.NextLogits(probe, gl)
		if !slices.Equal(gl, wl) {
			t.Fatalf("%s: the engine's version 2 is not the dequantised published model", d)
		}
	}
	mfs, err := n.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetGauge() != nil:
				vals[mf.GetName()] = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				vals[mf.GetName()] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	if vals["asyncrl_publish_quant_seconds"] != 2 {
		t.Fatalf("asyncrl_publish_quant_seconds counted %v versions, want 2", vals["asyncrl_publish_quant_seconds"])
	}
	if r := vals["asyncrl_publish_quant_max_rel_error"]; !(r > 0 && r <= 1.0/16) || !(vals["asyncrl_publish_quant_max_abs_error"] > 0) || !(vals["asyncrl_publish_quant_rms_error"] > 0) {
		t.Fatalf("quant metrics %v", vals)
	}
}
