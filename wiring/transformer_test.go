package wiring

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine"
	pmodel "github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/model/transformer"
)

// TestLoadPolicyDispatches: the engine's loader picks the built-in policy
// or model/transformer by config.json's model_type, and refuses another
// type naming the supported ones.
func TestLoadPolicyDispatches(t *testing.T) {
	hf := t.TempDir()
	c, err := transformer.NewPreset(transformer.Qwen3MoE, transformer.PresetTiny, 50)
	if err != nil {
		t.Fatal(err)
	}
	m, err := transformer.Init(c, transformer.GenerationConfig{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Save(hf, 0); err != nil {
		t.Fatal(err)
	}
	got, err := LoadPolicy(hf)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.(*transformer.Model); !ok {
		t.Fatalf("qwen3_moe checkpoint loaded as %T", got)
	}
	builtin := t.TempDir()
	p, _ := pmodel.New(pmodel.DefaultConfig(), 1)
	if err := p.SaveServing(builtin); err != nil {
		t.Fatal(err)
	}
	if got, err := LoadPolicy(builtin); err != nil {
		t.Fatal(err)
	} else if _, ok := got.(*pmodel.Model); !ok {
		t.Fatalf("built-in checkpoint loaded as %T", got)
	}
	transformerRewrite(t, hf, "mamba")
	if _, err := LoadPolicy(hf); err == nil || !strings.Contains(err.Error(), "mamba") {
		t.Fatalf("unknown model_type: %v", err)
	}
}

func transformerRewrite(t *testing.T, dir, modelType string) {
	t.Helper()
	c, err := transformer.ReadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := c.ConfigJSON()
	js = []byte(strings.Replace(string(js), `"model_type": "qwen3_moe"`, `"model_type": "`+modelType+`"`, 1))
	if err := os.WriteFile(dir+"/config.json", js, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestEngineQuantizeTransformer: engines.quantize applies to a Hugging
// Face model too: the engine's logprobs are those of
// transformer.Model.Quantized's weights, not the BF16 ones.
func TestEngineQuantizeTransformer(t *testing.T) {
	c, _ := transformer.NewPreset(transformer.Llama, transformer.PresetTiny, 64)
	c.InitializerRange = 0.2
	m, err := transformer.Init(c, transformer.GenerationConfig{}, 3)
	if err != nil {
		t.Fatal(err)
	}
	want, err := m.Quantized("int4_g128")
	if err != nil {
		t.Fatal(err)
	}
	cfg := engine.DefaultConfig()
	cfg.TimeScale = 0
	eng, err := engine.New(cfg, m, EngineQuantize(config.ServeINT4G128)...)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	srv := httptest.NewServer(eng.Handler())
	defer srv.Close()
	defer http.DefaultClient.CloseIdleConnections()
	prompt := []int32{1, 2, 3, 4}
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 1, "temperature": 0, "return_token_ids": true})
	resp, err := http.Post(srv.URL+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var cr engine.CompletionResponse
	if err := json.NewDecoder(resp.Body).Decode(&cr); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d: %v", resp.StatusCode, err)
	}
	tok, lp := cr.Choices[0].TokenIDs[0], float64(cr.Choices[0].OutputLogprobs[0])
	logprob := func(mm engine.Model) float64 { return nextLogprob(mm, prompt, tok) }
	if d := math.Abs(lp - logprob(want)); d > 1e-5 {
		t.Fatalf("served logprob %v, quantised model's %v", lp, logprob(want))
	}
	if d := math.Abs(lp - logprob(m)); d < 1e-4 {
		t.Fatalf("served logprob %v equals the BF16 model's %v: nothing was quantised", lp, logprob(m))
	}
}
