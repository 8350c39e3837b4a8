package transformer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/weights/quant"
	"github.com/asyncrl/asyncrl/weights/safetensors"
)

// TestQuantizableSet: exactly the projections of attention, MLP, experts
// and shared experts are quantised — never embeddings, lm_head, norms,
// routers, the correction bias or biases.
func TestQuantizableSet(t *testing.T) {
	m := tinyModel(t, DeepseekV3, 64, 1)
	q := m.QuantizedTensors()
	for _, want := range []string{"model.layers.0.self_attn.q_a_proj.weight", "model.layers.0.self_attn.q_b_proj.weight",
		"model.layers.0.self_attn.kv_a_proj_with_mqa.weight", "model.layers.0.self_attn.kv_b_proj.weight",
		"model.layers.0.self_attn.o_proj.weight", "model.layers.0.mlp.down_proj.weight",
		"model.layers.1.mlp.experts.7.up_proj.weight", "model.layers.2.mlp.shared_experts.gate_proj.weight"} {
		if !slices.Contains(q, want) {
			t.Errorf("%s is not quantised", want)
		}
	}
	for _, name := range q {
		for _, bad := range []string{"embed_tokens", "lm_head", "norm", "mlp.gate.", "bias"} {
			if strings.Contains(name, bad) {
				t.Errorf("%s is quantised", name)
			}
		}
	}
	if len(q) != 3*5+1*3+2*(8*3+3) {
		t.Errorf("%d quantised tensors", len(q))
	}
}

// TestQuantizedINT4: engines.quantize int4_g32 serves every projection as
// weights/quant.FakeQuantINT4 of the checkpoint's values, the rest
// unchanged, and the logits move.
func TestQuantizedINT4(t *testing.T) {
	for _, arch := range []Arch{Qwen3MoE, DeepseekV3} {
		m := tinyModel(t, arch, 64, 4)
		for _, q := range []string{"int4_g32", "int4_g128"} {
			qm, err := m.Quantized(q)
			if err != nil {
				t.Fatal(err)
			}
			group := map[string]int{"int4_g32": 32, "int4_g128": 128}[q]
			for i, tt := range m.w.tensors {
				got := *qm.w.tensors[i].data
				want := append([]float32(nil), *tt.data...)
				if tt.kind == kindProj {
					if err := quant.FakeQuantINT4(want, want, tt.shape[0], tt.shape[1], group); err != nil {
						t.Fatal(err)
					}
				}
				if !slices.Equal(got, want) {
					t.Fatalf("%s %s: %s is not what the quantiser serves", arch, q, tt.name)
				}
			}
			toks := []int32{3, 9, 27, 40}
			if d := maxAbsDiff(logitsOf(m, toks), logitsOf(qm, toks)); d == 0 {
				t.Fatalf("%s %s: quantised logits equal the BF16 ones", arch, q)
			}
		}
		if _, err := m.Quantized("int3"); err == nil {
			t.Fatal("an unknown quantisation was accepted")
		}
	}
}

// writeQuantized writes m's checkpoint with its projections quantised by
// s, as a publisher does (codes + scales, config.json quantization_config).
func writeQuantized(t *testing.T, m *Model, s quant.Scheme, dir string) {
	t.Helper()
	var ts []safetensors.Tensor
	for _, tt := range m.w.tensors {
		shape := []int64{}
		for _, d := range tt.shape {
			shape = append(shape, int64(d))
		}
		if tt.kind != kindProj {
			ts = append(ts, safetensors.Tensor{Name: tt.name, DType: safetensors.BF16, Shape: shape, Data: safetensors.EncodeBF16(*tt.data)})
			continue
		}
		w, sc, _, err := s.Quantize(tt.name, tt.shape[0], tt.shape[1], *tt.data)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, safetensors.Tensor{Name: w.Name, DType: safetensors.DType(w.DType), Shape: w.Shape, Data: w.Data},
			safetensors.Tensor{Name: sc.Name, DType: safetensors.DType(sc.DType), Shape: sc.Shape, Data: sc.Data})
	}
	if _, err := safetensors.WriteSharded(dir, ts, 30000, nil); err != nil {
		t.Fatal(err)
	}
	c := m.cfg
	qc, _ := json.Marshal(s.QuantizationConfig([]string{"lm_head"}))
	c.QuantizationConfigRaw = qc
	js, err := c.ConfigJSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ConfigFileName), js, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestLoadFP8AndMXFP8: an FP8 (block 128x128, weight_scale_inv) or MXFP8
// (weight_scale) checkpoint with quantization_config loads with every
// projection dequantised exactly as the scheme serves it; Quantized(q)
// computes the same weights in memory.
func TestLoadFP8AndMXFP8(t *testing.T) {
	for _, name := range []string{"fp8", "mxfp8"} {
		s, err := quant.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		m := tinyModel(t, DeepseekV3, 64, 8)
		dir := t.TempDir()
		writeQuantized(t, m, s, dir)
		got, err := Load(dir)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.cfg.Quant != name {
			t.Fatalf("config quant %q", got.cfg.Quant)
		}
		mem, err := m.Quantized(name)
		if err != nil {
			t.Fatal(err)
		}
		changed := false
		for i, tt := range mem.w.tensors {
			a, b := *tt.data, *got.w.tensors[i].data
			if !slices.Equal(a, b) {
				t.Fatalf("%s: %s loaded differs from the scheme's dequantised values", name, tt.name)
			}
			if tt.kind == kindProj && !slices.Equal(a, *m.w.tensors[i].data) {
				changed = true
			}
		}
		if !changed {
			t.Fatalf("%s: quantisation changed nothing", name)
		}
		r, err := Inspect(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Valid || !strings.HasPrefix(r.Quantization, name) {
			t.Fatalf("inspect: valid %v quantization %q (%s)", r.Valid, r.Quantization, r.Problem)
		}
		// Without quantization_config the F8 codes are refused.
		rewriteConfig(t, dir, func(m map[string]any) { delete(m, "quantization_config") })
		if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "unexpected tensor") && !strings.Contains(err.Error(), "F8_E4M3") {
			t.Fatalf("%s without quantization_config: %v", name, err)
		}
	}
}
