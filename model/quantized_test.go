package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/asyncrl/asyncrl/weights/quant"
	"github.com/asyncrl/asyncrl/weights/safetensors"
)

// A quantised serving checkpoint stores the linear weights as F8_E4M3 with
// their scale tensors (embedding and biases BF16), names its scheme in the
// safetensors metadata and vLLM's quantization_config in config.json, and
// loads — from the directory or from the bare file bytes — to exactly the
// dequantised model (QuantizedCopy): same weights, same logits.
func TestSaveServingQuantizedLoadsDequantised(t *testing.T) {
	m, _ := New(DefaultConfig(), 7)
	for _, name := range []string{"fp8", "mxfp8"} {
		s, _ := quant.Lookup(name)
		dir := t.TempDir()
		st, err := m.SaveServingQuantized(dir, s, map[string]string{"version": "3"})
		if err != nil {
			t.Fatal(err)
		}
		want, wantSt, err := m.QuantizedCopy(s)
		if err != nil {
			t.Fatal(err)
		}
		if st != wantSt || st.N == 0 || st.MaxRel > 1.0/16 || st.MaxAbs == 0 {
			t.Fatalf("%s: stats %+v, in memory %+v", name, st, wantSt)
		}
		got, err := LoadServing(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.params, want.params) {
			t.Fatalf("%s: loaded weights differ from the dequantised model", name)
		}
		b, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		fromBytes, err := LoadServingFrom(m.Config(), bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(fromBytes.params, want.params) {
			t.Fatalf("%s: LoadServingFrom differs from the dequantised model", name)
		}
		tokens := []int32{5, 9, 13, 2, 40}
		l1, l2 := make([]float32, m.VocabSize()), make([]float32, m.VocabSize())
		got.NextLogits(tokens, l1)
		want.NextLogits(tokens, l2)
		if !slices.Equal(l1, l2) {
			t.Fatalf("%s: logits differ", name)
		}
		// The quantised model is not the BF16 one: the test would pass
		// vacuously if quantisation were skipped.
		bf := m.Clone()
		bf.RoundBF16()
		if slices.Equal(bf.params, got.params) {
			t.Fatalf("%s: served weights equal the BF16 ones", name)
		}

		f, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		if f.Metadata[QuantizationKey] != name || f.Metadata["version"] != "3" {
			t.Fatalf("%s: metadata %v", name, f.Metadata)
		}
		for tn, dt := range map[string]safetensors.DType{
			"layers.0.weight": safetensors.F8E4M3, "head.weight": safetensors.F8E4M3,
			"embed.weight": safetensors.BF16, "layers.0.bias": safetensors.BF16, "head.bias": safetensors.BF16,
		} {
			info, err := f.Info(tn)
			if err != nil || info.DType != dt {
				t.Fatalf("%s: %s is %s (%v), want %s", name, tn, info.DType, err, dt)
			}
		}
		if _, err := f.Info(s.ScaleName("layers.0.weight")); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		f.Close()

		var cfg struct {
			QC map[string]any `json:"quantization_config"`
		}
		js, _ := os.ReadFile(filepath.Join(dir, ConfigFileName))
		if err := json.Unmarshal(js, &cfg); err != nil {
			t.Fatal(err)
		}
		wantMethod := map[string]string{"fp8": "fp8", "mxfp8": "modelopt"}[name]
		if cfg.QC["quant_method"] != wantMethod {
			t.Fatalf("%s: quantization_config %v", name, cfg.QC)
		}
	}
}

// The served error is small enough to keep the policy: every logit of the
// FP8 model stays close to the BF16 one on a real input (a sanity check on
// the wiring, not on the format: the element bound is quant's test).
func TestQuantizedCopyStaysClose(t *testing.T) {
	m, _ := New(DefaultConfig(), 11)
	s, _ := quant.Lookup("fp8")
	q, _, err := m.QuantizedCopy(s)
	if err != nil {
		t.Fatal(err)
	}
	tokens := []int32{3, 4, 5, 6, 7, 8}
	a, b := make([]float32, m.VocabSize()), make([]float32, m.VocabSize())
	m.NextLogits(tokens, a)
	q.NextLogits(tokens, b)
	var maxd float64
	for i := range a {
		maxd = max(maxd, math.Abs(float64(a[i]-b[i])))
	}
	if maxd == 0 || maxd > 0.5 {
		t.Fatalf("max logit difference %g: want small and non-zero", maxd)
	}
}

// A checkpoint that names an unknown scheme, or lacks a scale tensor, is
// refused rather than served as raw codes.
func TestLoadServingQuantizedRefusesBrokenCheckpoints(t *testing.T) {
	m, _ := New(DefaultConfig(), 7)
	s, _ := quant.Lookup("fp8")
	dir := t.TempDir()
	if _, err := m.SaveServingQuantized(dir, s, nil); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.Tensor
	for _, n := range f.Names() {
		b, info, err := f.ReadTensor(n)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, safetensors.Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: b})
	}
	f.Close()
	write := func(ts []safetensors.Tensor, md map[string]string) string {
		d := t.TempDir()
		if err := safetensors.WriteFile(filepath.Join(d, "model.safetensors"), ts, md); err != nil {
			t.Fatal(err)
		}
		js, _ := os.ReadFile(filepath.Join(dir, ConfigFileName))
		if err := os.WriteFile(filepath.Join(d, ConfigFileName), js, 0o644); err != nil {
			t.Fatal(err)
		}
		return d
	}
	noScale := slices.DeleteFunc(slices.Clone(ts), func(x safetensors.Tensor) bool { return x.Name == "head.weight_scale_inv" })
	for what, d := range map[string]string{
		"unknown scheme": write(ts, map[string]string{QuantizationKey: "fp3"}),
		"missing scale":  write(noScale, map[string]string{QuantizationKey: "fp8"}),
	} {
		if _, err := LoadServing(d); !errors.Is(err, ErrCheckpoint) {
			t.Errorf("%s: %v, want ErrCheckpoint", what, err)
		}
	}
}
