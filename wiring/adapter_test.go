package wiring

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine"
	pmodel "github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/model/transformer"
	"github.com/asyncrl/asyncrl/weights/safetensors"
)

// writePEFT writes a rank-4 PEFT adapter over layer 0's q_proj and
// down_proj of m (random A and B, as after some training) into dir.
func writePEFT(t *testing.T, dir string, m *transformer.Model) {
	t.Helper()
	c := m.Config()
	rng := rand.New(rand.NewPCG(8, 9))
	pair := func(mod string, in, out int) []safetensors.Tensor {
		mk := func(n int) []float32 {
			d := make([]float32, n)
			for i := range d {
				d[i] = float32(rng.NormFloat64() * 0.3)
			}
			return d
		}
		return []safetensors.Tensor{
			{Name: "base_model.model." + mod + ".lora_A.weight", DType: safetensors.F32, Shape: []int64{4, int64(in)}, Data: safetensors.EncodeF32(mk(4 * in))},
			{Name: "base_model.model." + mod + ".lora_B.weight", DType: safetensors.F32, Shape: []int64{int64(out), 4}, Data: safetensors.EncodeF32(mk(out * 4))},
		}
	}
	ts := append(pair("model.layers.0.self_attn.q_proj", c.HiddenSize, c.NumAttentionHeads*c.HeadDim),
		pair("model.layers.0.mlp.down_proj", c.IntermediateSize, c.HiddenSize)...)
	if err := safetensors.WriteFile(filepath.Join(dir, transformer.AdapterWeightsName), ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	cfg := `{"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "down_proj"], "bias": "none"}`
	if err := os.WriteFile(filepath.Join(dir, transformer.AdapterConfigName), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

func postJSON(t *testing.T, url string, body any) (int, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// nextLogprob is log_softmax(m's logits after prompt)[tok].
func nextLogprob(m engine.Model, prompt []int32, tok int32) float64 {
	l := make([]float32, m.VocabSize())
	m.NextLogits(prompt, l)
	mx := math.Inf(-1)
	for _, v := range l {
		mx = math.Max(mx, float64(v))
	}
	var s float64
	for _, v := range l {
		s += math.Exp(float64(v) - mx)
	}
	return float64(l[tok]) - mx - math.Log(s)
}

// TestEngineServesPEFTAdapter: the engine as the CLI wires it
// (LoadPolicy, LoadAdapter, engines.quantize) serves a PEFT adapter
// loaded over /v1/load_lora_adapter as transformer.LoadAdapter's model on
// the served base — the quantised one under engines.quantize, as vLLM
// adds LoRA on top of quantised weights — while requests for the base get
// the base's logprobs.
func TestEngineServesPEFTAdapter(t *testing.T) {
	for _, q := range []config.ServingQuantization{config.ServeNone, config.ServeINT4G128} {
		t.Run(string(q), func(t *testing.T) {
			c, _ := transformer.NewPreset(transformer.Qwen3, transformer.PresetTiny, 64)
			c.InitializerRange = 0.2
			m, err := transformer.Init(c, transformer.GenerationConfig{}, 3)
			if err != nil {
				t.Fatal(err)
			}
			served, err := m.Quantized(string(q))
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			writePEFT(t, dir, m)
			want, err := transformer.LoadAdapter(served, dir)
			if err != nil {
				t.Fatal(err)
			}
			cfg := engine.DefaultConfig()
			cfg.TimeScale = 0
			opts := append([]engine.Option{engine.WithLoader(LoadPolicy), engine.WithAdapterLoader(LoadAdapter)}, EngineQuantize(q)...)
			eng, err := engine.New(cfg, m, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer eng.Close()
			srv := httptest.NewServer(eng.Handler())
			defer srv.Close()
			defer http.DefaultClient.CloseIdleConnections()
			if code, out := postJSON(t, srv.URL+"/v1/load_lora_adapter", map[string]any{"lora_name": "ad", "lora_path": dir}); code != 200 {
				t.Fatalf("load: %d %s", code, out)
			}
			prompt := []int32{1, 2, 3, 4, 5}
			complete := func(model string) (int32, float64) {
				body := map[string]any{"prompt": prompt, "max_tokens": 1, "temperature": 0, "return_token_ids": true}
				if model != "" {
					body["model"] = model
				}
				code, out := postJSON(t, srv.URL+"/v1/completions", body)
				var cr engine.CompletionResponse
				if err := json.Unmarshal(out, &cr); err != nil || code != 200 {
					t.Fatalf("%d %s", code, out)
				}
				return cr.Choices[0].TokenIDs[0], float64(cr.Choices[0].OutputLogprobs[0])
			}
			tok, lp := complete("ad")
			if d := math.Abs(lp - nextLogprob(want, prompt, tok)); d > 1e-5 {
				t.Fatalf("adapter logprob %v, transformer.LoadAdapter's %v", lp, nextLogprob(want, prompt, tok))
			}
			if d := math.Abs(lp - nextLogprob(served, prompt, tok)); d < 1e-3 {
				t.Fatalf("adapter logprob %v is the base's %v: the adapter was not applied", lp, nextLogprob(served, prompt, tok))
			}
			btok, blp := complete("")
			if d := math.Abs(blp - nextLogprob(served, prompt, btok)); d > 1e-5 {
				t.Fatalf("base logprob %v, want %v", blp, nextLogprob(served, prompt, btok))
			}
		})
	}
}

// TestPEFTAdapterNeedsAnHFBase: a PEFT adapter on the built-in policy is
// refused with a 400 naming what it applies to; a malformed adapter is
// refused naming the file.
func TestPEFTAdapterNeedsAnHFBase(t *testing.T) {
	c, _ := transformer.NewPreset(transformer.Llama, transformer.PresetTiny, 64)
	hf, _ := transformer.Init(c, transformer.GenerationConfig{}, 3)
	dir := t.TempDir()
	writePEFT(t, dir, hf)
	p, _ := pmodel.New(pmodel.DefaultConfig(), 1)
	cfg := engine.DefaultConfig()
	cfg.TimeScale = 0
	eng, err := engine.New(cfg, p, engine.WithLoader(LoadPolicy), engine.WithAdapterLoader(LoadAdapter))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	err = eng.LoadLoRA("ad", dir)
	if err == nil || !strings.Contains(err.Error(), "applies to a Hugging Face model") {
		t.Fatalf("built-in base: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, transformer.AdapterConfigName), []byte(`{"r": 4, "lora_alpha": 8, "target_modules": ["q_proj"], "use_dora": true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := eng.LoadLoRA("ad", dir); err == nil || !strings.Contains(err.Error(), "use_dora") {
		t.Fatalf("DoRA: %v", err)
	}
}
