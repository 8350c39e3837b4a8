package transformer

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/weights/safetensors"
)

// loraT is one tensor of a test adapter.
type loraT struct {
	name  string
	shape []int
	data  []float32
	dtype safetensors.DType
}

// writeAdapter writes a PEFT adapter directory: cfg as
// adapter_config.json, ts as adapter_model.safetensors.
func writeAdapter(t testing.TB, dir string, cfg map[string]any, ts []loraT) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, AdapterConfigName), js, 0o644); err != nil {
		t.Fatal(err)
	}
	var out []safetensors.Tensor
	for _, x := range ts {
		st := safetensors.Tensor{Name: x.name, DType: x.dtype}
		if st.DType == "" {
			st.DType = safetensors.F32
		}
		for _, s := range x.shape {
			st.Shape = append(st.Shape, int64(s))
		}
		switch st.DType {
		case safetensors.BF16:
			st.Data = safetensors.EncodeBF16(x.data)
		case safetensors.F32:
			st.Data = safetensors.EncodeF32(x.data)
		default:
			st.Data = make([]byte, len(x.data)*st.DType.Size())
		}
		out = append(out, st)
	}
	if err := safetensors.WriteFile(filepath.Join(dir, AdapterWeightsName), out, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
}

// peftConfig is adapter_config.json as PEFT's LoraConfig.save_pretrained
// writes its main fields.
func peftConfig(r int, alpha float64, targets ...string) map[string]any {
	return map[string]any{"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": "base",
		"r": r, "lora_alpha": alpha, "target_modules": targets, "bias": "none", "use_dora": false,
		"use_rslora": false, "modules_to_save": nil, "lora_dropout": 0.0, "fan_in_fan_out": false,
		"rank_pattern": map[string]any{}, "alpha_pattern": map[string]any{}}
}

// randPair is module's lora_A [r, in] and lora_B [out, r] with values of
// size std, under PEFT's names.
func randPair(rng *rand.Rand, module string, r, in, out int, std float64) []loraT {
	mk := func(n int) []float32 {
		d := make([]float32, n)
		for i := range d {
			d[i] = float32(rng.NormFloat64() * std)
		}
		return d
	}
	return []loraT{
		{name: "base_model.model." + module + ".lora_A.weight", shape: []int{r, in}, data: mk(r * in)},
		{name: "base_model.model." + module + ".lora_B.weight", shape: []int{out, r}, data: mk(out * r)},
	}
}

// adaptedModules are the modules an adapter of arch's tiny preset
// adapts in the tests: every kind of projection the architecture has.
func adaptedModules(arch Arch) []string {
	switch arch {
	case DeepseekV3:
		// layer 0 is dense (first_k_dense_replace), layer 1 MoE
		return []string{"model.layers.0.self_attn.q_a_proj", "model.layers.0.self_attn.q_b_proj",
			"model.layers.0.self_attn.kv_a_proj_with_mqa", "model.layers.0.self_attn.kv_b_proj",
			"model.layers.0.self_attn.o_proj", "model.layers.0.mlp.gate_proj", "model.layers.0.mlp.down_proj",
			"model.layers.1.mlp.experts.3.up_proj", "model.layers.1.mlp.experts.0.down_proj",
			"model.layers.1.mlp.shared_experts.gate_proj"}
	case Qwen3MoE:
		return []string{"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj",
			"model.layers.1.self_attn.v_proj", "model.layers.1.self_attn.o_proj",
			"model.layers.0.mlp.experts.0.gate_proj", "model.layers.0.mlp.experts.1.up_proj",
			"model.layers.1.mlp.experts.7.down_proj"}
	}
	return []string{"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj",
		"model.layers.1.self_attn.v_proj", "model.layers.1.self_attn.o_proj",
		"model.layers.0.mlp.gate_proj", "model.layers.1.mlp.up_proj", "model.layers.1.mlp.down_proj"}
}

// testAdapter writes an adapter of rank r over adaptedModules(arch) of m.
func testAdapter(t testing.TB, dir string, m *Model, r int, alpha float64, seed uint64) []loraT {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	var ts []loraT
	for _, mod := range adaptedModules(m.cfg.Arch) {
		w, ok := m.w.byName(mod + ".weight")
		if !ok {
			t.Fatalf("%s: no %s", m.cfg.Arch, mod)
		}
		ts = append(ts, randPair(rng, mod, r, w.shape[1], w.shape[0], 0.3)...)
	}
	writeAdapter(t, dir, peftConfig(r, alpha, "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"), ts)
	return ts
}

// handMerged builds, independently of Apply, the model PEFT's merge gives:
// a copy of base with W += scaling · B·A (float64 sums) for each module.
func handMerged(t testing.TB, base *Model, ts []loraT, scaling float64) *Model {
	t.Helper()
	c := base.cfg
	w := build(&c)
	for i, tt := range w.tensors {
		copy(*tt.data, *base.w.tensors[i].data)
	}
	for i := 0; i < len(ts); i += 2 {
		A, B := ts[i], ts[i+1]
		mod := strings.TrimSuffix(strings.TrimPrefix(A.name, "base_model.model."), ".lora_A.weight")
		wt, _ := w.byName(mod + ".weight")
		r, in, out := A.shape[0], A.shape[1], B.shape[0]
		W := *wt.data
		for o := range out {
			for j := range in {
				var s float64
				for k := range r {
					s += float64(B.data[o*r+k]) * float64(A.data[k*in+j])
				}
				W[o*in+j] = float32(float64(W[o*in+j]) + scaling*s)
			}
		}
	}
	return newModel(&c, base.gen, w)
}

func relDiff(a, b []float32) float64 {
	var num, den float64
	for i := range a {
		num = max(num, math.Abs(float64(a[i]-b[i])))
		den = max(den, math.Abs(float64(b[i])))
	}
	return num / den
}

// TestAdapterEqualsHandMerge: on every architecture, Apply serves the
// hand-merged model (W + lora_alpha/r · B·A on attention, dense MLP,
// expert and shared-expert projections), leaves the base untouched and
// shares its unadapted parameters; use_rslora scales by lora_alpha/√r.
func TestAdapterEqualsHandMerge(t *testing.T) {
	for _, arch := range Archs() {
		for _, rs := range []bool{false, true} {
			name := string(arch)
			if rs {
				name += "/rslora"
			}
			t.Run(name, func(t *testing.T) {
				base := tinyModel(t, arch, 97, 11)
				toks := randTokens(rand.New(rand.NewPCG(3, 4)), 9, 97)
				before := logitsOf(base, toks)
				dir := t.TempDir()
				const r, alpha = 4, 8.0
				ts := testAdapter(t, dir, base, r, alpha, 5)
				scaling := alpha / r
				if rs {
					cfg := peftConfig(r, alpha, "q_proj")
					cfg["use_rslora"] = true
					writeAdapter(t, dir, cfg, ts)
					scaling = alpha / math.Sqrt(r)
				}
				got, err := LoadAdapter(base, dir)
				if err != nil {
					t.Fatal(err)
				}
				want := handMerged(t, base, ts, scaling)
				// the merged weights themselves
				for i, tt := range got.w.tensors {
					if d := maxAbsDiff(*tt.data, *want.w.tensors[i].data); d > 1e-5 {
						t.Fatalf("%s differs from the hand merge by %g", tt.name, d)
					}
				}
				// and what the engine computes with them (the packed transposes)
				gl, wl := logitsOf(got, toks), logitsOf(want, toks)
				if d := relDiff(gl, wl); d > 1e-4 {
					t.Fatalf("adapted logits differ from the hand-merged model's by %g (relative)", d)
				}
				// the adapter matters: far from the base's logits
				if d := relDiff(gl, before); d < 1e-2 {
					t.Fatalf("adapted logits are within %g of the base's: the adapter was not applied", d)
				}
				// the base is unchanged and still serves the same logits
				if d := maxAbsDiff(logitsOf(base, toks), before); d != 0 {
					t.Fatalf("base logits moved by %g after Apply", d)
				}
				adapted := map[string]bool{}
				for _, mod := range adaptedModules(arch) {
					adapted[mod+".weight"] = true
				}
				for i, tt := range got.w.tensors {
					bt := base.w.tensors[i]
					same := &(*tt.data)[0] == &(*bt.data)[0]
					if adapted[tt.name] == same {
						t.Fatalf("%s: shares the base's memory = %v, want %v", tt.name, same, !adapted[tt.name])
					}
				}
			})
		}
	}
}

// TestAdapterBF16AndUnprefixedNames: BF16 adapter tensors are widened, and
// names without PEFT's base_model.model. prefix (which vLLM also accepts)
// resolve to the same modules.
func TestAdapterBF16AndUnprefixedNames(t *testing.T) {
	base := tinyModel(t, Qwen3, 97, 11)
	dir := t.TempDir()
	ts := testAdapter(t, dir, base, 2, 4, 9)
	for _, x := range ts {
		roundBF16(x.data) // F32 values a BF16 file holds exactly
	}
	writeAdapter(t, dir, peftConfig(2, 4, "q_proj"), ts)
	var other []loraT
	for _, x := range ts {
		x.name = strings.TrimPrefix(x.name, "base_model.model.")
		x.dtype = safetensors.BF16
		other = append(other, x)
	}
	dir2 := t.TempDir()
	writeAdapter(t, dir2, peftConfig(2, 4, "q_proj"), other)
	a, err := LoadAdapter(base, dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadAdapter(base, dir2)
	if err != nil {
		t.Fatal(err)
	}
	toks := []int32{1, 5, 9, 33}
	if d := maxAbsDiff(logitsOf(a, toks), logitsOf(b, toks)); d != 0 {
		t.Fatalf("BF16 / unprefixed adapter differs by %g", d)
	}
}

// TestAdapterRefusals: every adapter vLLM refuses, or this package cannot
// serve as PEFT trained it, is refused with an error naming the file and
// the field or tensor, and nothing is returned.
func TestAdapterRefusals(t *testing.T) {
	dense := tinyModel(t, Llama, 97, 11) // untied lm_head
	moe := tinyModel(t, Qwen3MoE, 97, 11)
	rng := rand.New(rand.NewPCG(1, 2))
	q := func(m *Model) []loraT {
		return randPair(rng, "model.layers.0.self_attn.q_proj", 2, m.cfg.HiddenSize, m.cfg.NumAttentionHeads*m.cfg.HeadDim, 0.1)
	}
	with := func(k string, v any) map[string]any {
		c := peftConfig(2, 4, "q_proj")
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	rename := func(ts []loraT, from, to string) []loraT {
		out := append([]loraT(nil), ts...)
		for i := range out {
			out[i].name = strings.Replace(out[i].name, from, to, 1)
		}
		return out
	}
	H := dense.cfg.HiddenSize
	cases := []struct {
		name string
		base *Model
		cfg  map[string]any
		ts   []loraT
		want []string // substrings of the error
	}{
		{"missing r", dense, with("r", nil), q(dense), []string{AdapterConfigName, `"r"`, "missing"}},
		{"missing lora_alpha", dense, with("lora_alpha", nil), q(dense), []string{`"lora_alpha"`, "missing"}},
		{"missing target_modules", dense, with("target_modules", nil), q(dense), []string{`"target_modules"`, "missing"}},
		{"rank 0", dense, with("r", 0), q(dense), []string{`"r"`, "positive"}},
		{"not LoRA", dense, with("peft_type", "IA3"), q(dense), []string{`"peft_type"`, "IA3"}},
		{"DoRA", dense, with("use_dora", true), q(dense), []string{`"use_dora"`, "DoRA"}},
		{"modules_to_save", dense, with("modules_to_save", []string{"lm_head"}), q(dense), []string{`"modules_to_save"`, "lm_head"}},
		{"bias all", dense, with("bias", "all"), q(dense), []string{`"bias"`, `"all"`}},
		{"bias lora_only", dense, with("bias", "lora_only"), q(dense), []string{`"bias"`, "lora_only"}},
		{"lora_bias", dense, with("lora_bias", true), q(dense), []string{`"lora_bias"`}},
		{"fan_in_fan_out", dense, with("fan_in_fan_out", true), q(dense), []string{`"fan_in_fan_out"`}},
		{"rank_pattern", dense, with("rank_pattern", map[string]int{"q_proj": 8}), q(dense), []string{`"rank_pattern"`}},
		{"alpha_pattern", dense, with("alpha_pattern", map[string]int{"q_proj": 8}), q(dense), []string{`"alpha_pattern"`}},
		{"target_modules type", dense, with("target_modules", 3), q(dense), []string{`"target_modules"`}},
		{"unknown module", dense, nil, rename(q(dense), "layers.0.", "layers.9."),
			[]string{AdapterWeightsName, "model.layers.9.self_attn.q_proj.lora_A.weight", "no module", "2 layers"}},
		{"unknown projection name", dense, nil, rename(q(dense), "q_proj", "qkv_proj"),
			[]string{"model.layers.0.self_attn.qkv_proj", "no module"}},
		{"A in mismatch", dense, nil, randPair(rng, "model.layers.0.self_attn.q_proj", 2, H+1, H, 0.1),
			[]string{"model.layers.0.self_attn.q_proj.lora_A.weight", "takes 64 inputs"}},
		{"B out mismatch", dense, nil, randPair(rng, "model.layers.0.mlp.down_proj", 2, dense.cfg.IntermediateSize, H+3, 0.1),
			[]string{"model.layers.0.mlp.down_proj.lora_B.weight", "has 64 outputs"}},
		{"router gate", moe, nil, randPair(rng, "model.layers.0.mlp.gate", 2, H, moe.cfg.NumExperts, 0.1),
			[]string{"model.layers.0.mlp.gate.lora_A.weight", "MoE router gate", "not a linear projection"}},
		{"lm_head", dense, nil, randPair(rng, "lm_head", 2, H, 97, 0.1), []string{"lm_head.lora_A.weight", "lm_head"}},
		{"embedding", dense, nil, []loraT{{name: "base_model.model.model.embed_tokens.lora_embedding_A", shape: []int{2, 97}, data: make([]float32, 194)}},
			[]string{"lora_embedding_A", "embedding LoRA"}},
		{"DoRA magnitude", dense, nil, append(q(dense), loraT{name: "base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector", shape: []int{1, H}, data: make([]float32, H)}),
			[]string{"lora_magnitude_vector", "DoRA"}},
		{"bias tensor", dense, nil, append(q(dense), loraT{name: "base_model.model.model.layers.0.self_attn.q_proj.lora_B.bias", shape: []int{1, H}, data: make([]float32, H)}),
			[]string{"lora_B.bias", "bias"}},
		{"other tensor", dense, nil, append(q(dense), loraT{name: "base_model.model.model.norm.weight", shape: []int{1, H}, data: make([]float32, H)}),
			[]string{"model.norm.weight", "not a LoRA weight"}},
		{"fused 3-D experts", moe, nil, randPair(rng, "model.layers.0.mlp.experts.base_layer", 2, H, 32, 0.1),
			[]string{"experts.base_layer", "fused 3-D experts"}},
		{"only lora_A", dense, nil, q(dense)[:1], []string{"no lora_B"}},
		{"only lora_B", dense, nil, q(dense)[1:], []string{"no lora_A"}},
		{"rank disagrees with r", dense, nil, randPair(rng, "model.layers.0.self_attn.q_proj", 3, H, H, 0.1),
			[]string{"q_proj.lora_A.weight", "r = 2"}},
		{"1-D tensor", dense, nil, []loraT{{name: "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", shape: []int{2 * H}, data: make([]float32, 2*H)}},
			[]string{"q_proj.lora_A.weight", "matrices"}},
		{"integer dtype", dense, nil, []loraT{{name: "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", shape: []int{2, H}, data: make([]float32, 2*H), dtype: safetensors.I32}},
			[]string{"q_proj.lora_A.weight", "I32"}},
		{"NaN", dense, nil, func() []loraT {
			ts := q(dense)
			ts[1].data[3] = float32(math.NaN())
			return ts
		}(), []string{"q_proj.lora_B.weight", "NaN"}},
		{"empty", dense, nil, []loraT{}, []string{"no LoRA weights"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := tc.cfg
			if cfg == nil {
				cfg = peftConfig(2, 4, "q_proj")
			}
			writeAdapter(t, dir, cfg, tc.ts)
			m, err := LoadAdapter(tc.base, dir)
			if err == nil || m != nil {
				t.Fatalf("accepted (model %v, err %v)", m != nil, err)
			}
			if !errors.Is(err, ErrAdapter) {
				t.Fatalf("error does not wrap ErrAdapter: %v", err)
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Fatalf("error %q does not say %q", err, s)
				}
			}
		})
	}
	t.Run("adapter_model.bin only", func(t *testing.T) {
		dir := t.TempDir()
		writeAdapter(t, dir, peftConfig(2, 4, "q_proj"), q(dense))
		if err := os.Rename(filepath.Join(dir, AdapterWeightsName), filepath.Join(dir, "adapter_model.bin")); err != nil {
			t.Fatal(err)
		}
		_, err := ReadAdapter(dir)
		if !errors.Is(err, ErrAdapter) || !strings.Contains(err.Error(), "adapter_model.bin") || !strings.Contains(err.Error(), "safe_serialization") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("not an adapter dir", func(t *testing.T) {
		if IsAdapterDir(t.TempDir()) {
			t.Fatal("an empty directory is an adapter")
		}
		dir := t.TempDir()
		writeAdapter(t, dir, peftConfig(2, 4, "q_proj"), q(dense))
		if !IsAdapterDir(dir) {
			t.Fatal("a PEFT directory is not an adapter")
		}
	})
}

// TestAdapterModelIsAnEngineModel: the adapted model decodes with its own
// KV caches (the batched path the engine uses) to the same logits as its
// stateless prefill, and saves/loads as a merged checkpoint.
func TestAdapterModelIsAnEngineModel(t *testing.T) {
	base := tinyModel(t, DeepseekV3, 97, 11)
	dir := t.TempDir()
	testAdapter(t, dir, base, 4, 16, 2)
	m, err := LoadAdapter(base, dir)
	if err != nil {
		t.Fatal(err)
	}
	toks := []int32{3, 4, 5, 6, 7, 8}
	s := m.NewCache()
	logits := make([]float32, m.VocabSize())
	for i := range toks {
		if err := m.ForwardSeqs([]*Seq{s}, [][]int32{toks[i : i+1]}, [][]float32{logits}); err != nil {
			t.Fatal(err)
		}
	}
	if d := maxAbsDiff(logits, logitsOf(m, toks)); d != 0 {
		t.Fatalf("cached decode differs from prefill by %g", d)
	}
	out := t.TempDir()
	if err := m.Save(out, 0); err != nil {
		t.Fatal(err)
	}
	back, err := Load(out)
	if err != nil {
		t.Fatal(err)
	}
	// Save writes BF16: the merged weights rounded, so close, not equal
	if d := relDiff(logitsOf(back, toks), logitsOf(m, toks)); d > 0.05 {
		t.Fatalf("saved merged model differs by %g", d)
	}
}
