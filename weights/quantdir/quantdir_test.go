package quantdir

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/asyncrl/asyncrl/weights/quant"
	"github.com/asyncrl/asyncrl/weights/safetensors"
)

// hfCheckpoint writes a small checkpoint with Hugging Face names: what
// vLLM quantises (projections, experts, DeepSeek's MLA projections) and
// what it does not (embedding, lm_head, norms, the router gate and its
// correction bias).
func hfCheckpoint(t *testing.T, dir string, shardBytes int64) map[string][]float32 {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	shapes := []struct {
		name  string
		shape []int64
	}{
		{"model.embed_tokens.weight", []int64{300, 64}},
		{"model.layers.0.input_layernorm.weight", []int64{64}},
		{"model.layers.0.self_attn.q_proj.weight", []int64{256, 64}},
		{"model.layers.0.self_attn.kv_a_proj_with_mqa.weight", []int64{40, 64}},
		{"model.layers.0.self_attn.kv_b_proj.weight", []int64{130, 32}},
		{"model.layers.0.mlp.gate.weight", []int64{8, 64}},
		{"model.layers.0.mlp.gate.e_score_correction_bias", []int64{8}},
		{"model.layers.0.mlp.experts.3.down_proj.weight", []int64{64, 200}},
		{"model.layers.0.mlp.shared_experts.up_proj.weight", []int64{96, 64}},
		{"model.norm.weight", []int64{64}},
		{"lm_head.weight", []int64{300, 64}},
	}
	vals := map[string][]float32{}
	var ts []safetensors.Tensor
	for _, s := range shapes {
		n := int64(1)
		for _, d := range s.shape {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = safetensors.Float32FromBF16(safetensors.BF16FromFloat32(float32(rng.NormFloat64() * 0.05)))
		}
		vals[s.name] = v
		ts = append(ts, safetensors.Tensor{Name: s.name, DType: safetensors.BF16, Shape: s.shape, Data: safetensors.EncodeBF16(v)})
	}
	if _, err := safetensors.WriteSharded(dir, ts, shardBytes, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	cfg := `{"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 64, "torch_dtype": "bfloat16"}`
	for name, body := range map[string]string{"config.json": cfg, "tokenizer.json": `{"model": {}}`, "generation_config.json": `{"eos_token_id": 1}`} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return vals
}

func TestQuantizeHFCheckpoint(t *testing.T) {
	for _, scheme := range []string{"fp8", "mxfp8"} {
		for _, shard := range []int64{0, 40_000} {
			s, err := quant.Lookup(scheme)
			if err != nil {
				t.Fatal(err)
			}
			src, dst := t.TempDir(), filepath.Join(t.TempDir(), "q")
			want := hfCheckpoint(t, src, shard)
			st, err := Quantize(src, dst, s)
			if err != nil {
				t.Fatalf("%s shard %d: %v", scheme, shard, err)
			}
			ck, err := safetensors.OpenDir(dst)
			if err != nil {
				t.Fatalf("%s: the quantised directory does not open: %v", scheme, err)
			}
			if got := ck.Metadata()[QuantizationKey]; got != scheme {
				t.Errorf("metadata %s = %q", QuantizationKey, got)
			}
			if shard > 0 && len(ck.Shards()) < 2 {
				t.Errorf("%s: %d shards, want the source's sharding", scheme, len(ck.Shards()))
			}
			var quantised int
			for name, src := range want {
				b, info, err := ck.ReadTensor(name)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if !Quantizable(name, info.Shape) {
					if info.DType != safetensors.BF16 || !slices.Equal(b, safetensors.EncodeBF16(src)) {
						t.Errorf("%s: %s, changed; vLLM serves it unquantised", name, info.DType)
					}
					continue
				}
				quantised++
				sb, sinfo, err := ck.ReadTensor(s.ScaleName(name))
				if err != nil {
					t.Fatalf("%s: no scale: %v", name, err)
				}
				served, err := s.Dequantize(quant.Tensor{Name: name, DType: string(info.DType), Shape: info.Shape, Data: b},
					quant.Tensor{Name: s.ScaleName(name), DType: string(sinfo.DType), Shape: sinfo.Shape, Data: sb}, nil)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				for i := range src {
					// E4M3 keeps 3 mantissa bits: half an ulp of the
					// scaled value, plus the subnormal floor
					if d := math.Abs(float64(served[i] - src[i])); d > math.Abs(float64(src[i]))/16+1e-3 {
						t.Fatalf("%s[%d] served %g, master %g", name, i, served[i], src[i])
					}
				}
			}
			if quantised != 5 {
				t.Errorf("%d tensors quantised, want the 5 projections", quantised)
			}
			if st.N == 0 || st.MaxAbs == 0 {
				t.Errorf("stats %+v: nothing measured", st)
			}
			var cfg map[string]any
			js, err := os.ReadFile(filepath.Join(dst, "config.json"))
			if err != nil || json.Unmarshal(js, &cfg) != nil {
				t.Fatalf("config.json: %v", err)
			}
			qc, _ := cfg["quantization_config"].(map[string]any)
			if cfg["model_type"] != "deepseek_v3" || qc == nil || qc["quant_method"] == nil {
				t.Errorf("config.json %v: want the source's keys and a quantization_config", cfg)
			}
			// the key vLLM reads the unquantised modules from: Fp8Config's
			// ignored_layers, ModelOpt's config.json "ignore" (quant.Scheme
			// QuantizationConfig cites both)
			key := map[string]string{"fp8": "ignored_layers", "mxfp8": "ignore"}[scheme]
			ignored, _ := qc[key].([]any)
			if want := []any{"lm_head", "model.layers.0.mlp.gate"}; !slices.Equal(ignored, want) {
				t.Errorf("%s %s = %v, want %v (the router gate and lm_head stay unquantised)", scheme, key, ignored, want)
			}
			if _, ok := qc["exclude_modules"]; ok {
				t.Errorf("%s: exclude_modules is hf_quant_config.json's nested key; vLLM ignores it in config.json", scheme)
			}
			if _, sinfo, err := ck.ReadTensor(s.ScaleName("model.layers.0.self_attn.q_proj.weight")); err != nil {
				t.Error(err)
			} else if want := map[string]safetensors.DType{"fp8": safetensors.F32, "mxfp8": safetensors.U8}[scheme]; sinfo.DType != want {
				t.Errorf("%s scale dtype %s, want %s (the dtype of vLLM's scale parameter)", scheme, sinfo.DType, want)
			}
			for _, f := range []string{"tokenizer.json", "generation_config.json"} {
				if _, err := os.Stat(filepath.Join(dst, f)); err != nil {
					t.Errorf("%s not copied: %v", f, err)
				}
			}
			ck.Close()

			// a quantised checkpoint is not quantised again
			if _, err := Quantize(dst, filepath.Join(t.TempDir(), "qq"), s); !errors.Is(err, ErrQuantized) {
				t.Errorf("quantising a quantised checkpoint: %v, want ErrQuantized", err)
			}
		}
	}
}

func TestQuantizableNames(t *testing.T) {
	for name, want := range map[string]bool{
		"model.layers.3.self_attn.o_proj.weight":             true,
		"model.layers.3.mlp.experts.17.gate_proj.weight":     true,
		"model.layers.3.self_attn.q_a_proj.weight":           true,
		"model.layers.3.self_attn.kv_a_proj_with_mqa.weight": true,
		"model.layers.3.mlp.gate.weight":                     false,
		"model.layers.3.self_attn.q_a_layernorm.weight":      false,
		"model.embed_tokens.weight":                          false,
		"lm_head.weight":                                     false,
		"model.layers.3.mlp.gate.e_score_correction_bias":    false,
	} {
		if got := Quantizable(name, []int64{8, 8}); got != want {
			t.Errorf("Quantizable(%s) = %v, want %v", name, got, want)
		}
	}
	if Quantizable("model.layers.0.self_attn.q_proj.bias", []int64{8}) {
		t.Error("a bias is quantised")
	}
}

// A tied checkpoint has no lm_head tensor; the config still lists lm_head
// as unquantised (vLLM may build one and quantise it otherwise).
func TestTiedModelListsLMHead(t *testing.T) {
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "q")
	vals := make([]float32, 64*64)
	ts := []safetensors.Tensor{
		{Name: "model.embed_tokens.weight", DType: safetensors.BF16, Shape: []int64{64, 64}, Data: safetensors.EncodeBF16(vals)},
		{Name: "model.layers.0.self_attn.o_proj.weight", DType: safetensors.BF16, Shape: []int64{64, 64}, Data: safetensors.EncodeBF16(vals)},
	}
	if _, err := safetensors.WriteSharded(src, ts, 0, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "config.json"), []byte(`{"model_type": "qwen3", "tie_word_embeddings": true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	s, _ := quant.Lookup("mxfp8")
	if _, err := Quantize(src, dst, s); err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Q map[string]any `json:"quantization_config"`
	}
	js, err := os.ReadFile(filepath.Join(dst, "config.json"))
	if err != nil || json.Unmarshal(js, &cfg) != nil {
		t.Fatalf("config.json: %v", err)
	}
	if got, _ := cfg.Q["ignore"].([]any); !slices.Equal(got, []any{"lm_head"}) {
		t.Errorf("ignore = %v, want [lm_head]", got)
	}
}
