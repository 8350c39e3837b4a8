package transformer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/weights/safetensors"
)

func sameWeights(t *testing.T, a, b *Model) {
	t.Helper()
	if len(a.w.tensors) != len(b.w.tensors) {
		t.Fatalf("%d tensors vs %d", len(a.w.tensors), len(b.w.tensors))
	}
	for i, ta := range a.w.tensors {
		tb := b.w.tensors[i]
		if ta.name != tb.name || !slices.Equal(ta.shape, tb.shape) {
			t.Fatalf("tensor %d: %s %v vs %s %v", i, ta.name, ta.shape, tb.name, tb.shape)
		}
		da, db := *ta.data, *tb.data
		for j := range da {
			if da[j] != db[j] && !(da[j] != da[j] && db[j] != db[j]) {
				t.Fatalf("%s[%d]: %v vs %v", ta.name, j, da[j], db[j])
			}
		}
	}
}

// TestSaveLoadRoundTrip: every architecture saves and loads back bit for
// bit (the weights are BF16 values), single-file and sharded, and the
// loaded model computes the same logits.
func TestSaveLoadRoundTrip(t *testing.T) {
	for _, arch := range Archs() {
		for _, shard := range []int64{0, 20000} {
			t.Run(string(arch)+"/shard"+map[bool]string{true: "ed", false: "-none"}[shard > 0], func(t *testing.T) {
				m := tinyModel(t, arch, 61, 3)
				dir := t.TempDir()
				if err := m.Save(dir, shard); err != nil {
					t.Fatal(err)
				}
				_, errIdx := os.Stat(filepath.Join(dir, safetensors.IndexFileName))
				if (shard > 0) != (errIdx == nil) {
					t.Fatalf("shard %d: index present = %v", shard, errIdx == nil)
				}
				got, err := Load(dir)
				if err != nil {
					t.Fatal(err)
				}
				sameWeights(t, m, got)
				if !reflectEqualConfig(m.cfg, got.cfg) {
					t.Fatalf("config changed:\n%+v\n%+v", m.cfg, got.cfg)
				}
				if !slices.Equal(got.EOSIDs(), []int32{2}) {
					t.Fatalf("EOS ids %v", got.EOSIDs())
				}
				toks := []int32{1, 5, 9, 33, 60}
				if d := maxAbsDiff(logitsOf(m, toks), logitsOf(got, toks)); d != 0 {
					t.Fatalf("logits differ by %g after the round trip", d)
				}
			})
		}
	}
}

func reflectEqualConfig(a, b Config) bool {
	ja, _ := a.ConfigJSON()
	jb, _ := b.ConfigJSON()
	return string(ja) == string(jb)
}

// TestConfigJSONAsHF: config.json carries HF's field names for the arch.
func TestConfigJSONAsHF(t *testing.T) {
	want := map[Arch][]string{
		Qwen3:      {"architectures", "head_dim", "rope_theta", "tie_word_embeddings", "use_sliding_window", "max_window_layers"},
		Qwen3MoE:   {"num_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers"},
		Llama:      {"rope_scaling", "mlp_bias", "pretraining_tp"},
		DeepseekV3: {"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "n_routed_experts", "n_shared_experts", "n_group", "topk_group", "routed_scaling_factor", "first_k_dense_replace", "scoring_func", "topk_method", "rope_interleave"},
	}
	class := map[Arch]string{Qwen3: "Qwen3ForCausalLM", Qwen3MoE: "Qwen3MoeForCausalLM", Llama: "LlamaForCausalLM", DeepseekV3: "DeepseekV3ForCausalLM"}
	for arch, keys := range want {
		c, err := NewPreset(arch, PresetTiny, 100)
		if err != nil {
			t.Fatal(err)
		}
		js, err := c.ConfigJSON()
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(js, &m); err != nil {
			t.Fatal(err)
		}
		for _, k := range append(keys, "model_type", "torch_dtype", "vocab_size", "rms_norm_eps") {
			if _, ok := m[k]; !ok {
				t.Errorf("%s: config.json lacks %q", arch, k)
			}
		}
		if m["torch_dtype"] != "bfloat16" || m["model_type"] != string(arch) {
			t.Errorf("%s: torch_dtype %v model_type %v", arch, m["torch_dtype"], m["model_type"])
		}
		if a, _ := m["architectures"].([]any); len(a) != 1 || a[0] != class[arch] {
			t.Errorf("%s: architectures %v", arch, m["architectures"])
		}
	}
}

// writeTensors rewrites dir's model.safetensors through edit.
func editCheckpoint(t *testing.T, dir string, edit func([]safetensors.Tensor) []safetensors.Tensor) {
	t.Helper()
	f, err := safetensors.Open(filepath.Join(dir, safetensors.SingleFileName))
	if err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.Tensor
	for _, info := range f.Tensors {
		b, _, err := f.ReadTensor(info.Name)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, safetensors.Tensor{Name: info.Name, DType: info.DType, Shape: info.Shape, Data: b})
	}
	f.Close()
	ts = edit(ts)
	if err := safetensors.WriteFile(filepath.Join(dir, safetensors.SingleFileName), ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
}

// TestLoadRefusesBadCheckpoints: each bad input is refused with an error
// naming the file and the tensor (or config field).
func TestLoadRefusesBadCheckpoints(t *testing.T) {
	const victim = "model.layers.1.self_attn.k_proj.weight"
	cases := []struct {
		name  string
		arch  Arch
		edit  func(dir string)
		wants []string
	}{
		{"missing tensor", Qwen3, func(dir string) {
			editCheckpoint(t, dir, func(ts []safetensors.Tensor) []safetensors.Tensor {
				return slices.DeleteFunc(ts, func(x safetensors.Tensor) bool { return x.Name == victim })
			})
		}, []string{victim, "missing", "model.safetensors"}},
		{"wrong shape", Qwen3, func(dir string) {
			editCheckpoint(t, dir, func(ts []safetensors.Tensor) []safetensors.Tensor {
				for i := range ts {
					if ts[i].Name == victim {
						ts[i].Shape = []int64{ts[i].Shape[1], ts[i].Shape[0]}
					}
				}
				return ts
			})
		}, []string{victim, "shape", "model.safetensors"}},
		{"bad dtype", Qwen3, func(dir string) {
			editCheckpoint(t, dir, func(ts []safetensors.Tensor) []safetensors.Tensor {
				for i := range ts {
					if ts[i].Name == victim {
						ts[i].DType = safetensors.I16
					}
				}
				return ts
			})
		}, []string{victim, "dtype", "I16", "model.safetensors"}},
		{"unexpected tensor", Qwen3, func(dir string) {
			editCheckpoint(t, dir, func(ts []safetensors.Tensor) []safetensors.Tensor {
				return append(ts, safetensors.Tensor{Name: "model.layers.7.mlp.gate_proj.weight", DType: safetensors.BF16, Shape: []int64{2}, Data: make([]byte, 4)})
			})
		}, []string{"model.layers.7.mlp.gate_proj.weight", "unexpected", "model.safetensors"}},
		{"missing expert", Qwen3MoE, func(dir string) {
			editCheckpoint(t, dir, func(ts []safetensors.Tensor) []safetensors.Tensor {
				return slices.DeleteFunc(ts, func(x safetensors.Tensor) bool { return x.Name == "model.layers.0.mlp.experts.5.down_proj.weight" })
			})
		}, []string{"model.layers.0.mlp.experts.5.down_proj.weight", "missing"}},
		{"missing correction bias", DeepseekV3, func(dir string) {
			editCheckpoint(t, dir, func(ts []safetensors.Tensor) []safetensors.Tensor {
				return slices.DeleteFunc(ts, func(x safetensors.Tensor) bool { return x.Name == "model.layers.2.mlp.gate.e_score_correction_bias" })
			})
		}, []string{"model.layers.2.mlp.gate.e_score_correction_bias", "missing"}},
		{"unknown architecture", Qwen3, func(dir string) {
			rewriteConfig(t, dir, func(m map[string]any) { m["model_type"] = "mamba" })
		}, []string{"config.json", "mamba", "qwen3, qwen3_moe, llama, deepseek_v3"}},
		{"bad field", Qwen3, func(dir string) {
			rewriteConfig(t, dir, func(m map[string]any) { m["num_key_value_heads"] = 3 })
		}, []string{"config.json", "num_key_value_heads"}},
		{"eos outside vocab", Qwen3, func(dir string) {
			os.WriteFile(filepath.Join(dir, GenerationConfigFileName), []byte(`{"eos_token_id": [2, 999]}`), 0o644)
		}, []string{"generation_config.json", "eos_token_id", "999"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := tinyModel(t, tc.arch, 61, 3).Save(dir, 0); err != nil {
				t.Fatal(err)
			}
			tc.edit(dir)
			m, err := Load(dir)
			if err == nil || m != nil {
				t.Fatalf("loaded (%v)", err)
			}
			if !errors.Is(err, ErrCheckpoint) && !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v wraps neither ErrCheckpoint nor ErrConfig", err)
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func rewriteConfig(t *testing.T, dir string, edit func(map[string]any)) {
	t.Helper()
	p := filepath.Join(dir, ConfigFileName)
	js, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	js, _ = json.Marshal(m)
	if err := os.WriteFile(p, js, 0o644); err != nil {
		t.Fatal(err)
	}
}
