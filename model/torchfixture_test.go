package model

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// TestLoadTorchServingCheckpoint: a serving checkpoint written by the
// PyTorch worker (integrations/torch/tests/make_fixture.py: WindowMLP.
// save_serving, BF16 safetensors + config.json) loads with LoadServing
// unchanged, and NextLogits reproduces the logits torch computed from it
// (torch_serving_logits.json) to 1e-5 — the torch→Go direction of the
// checkpoint interop (the Go→torch one is integrations/torch/tests/
// test_interop.py).
func TestLoadTorchServingCheckpoint(t *testing.T) {
	dir := filepath.Join("..", "integrations", "torch", "tests", "testdata")
	js, err := os.ReadFile(filepath.Join(dir, "torch_serving_logits.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Checkpoint string `json:"checkpoint"`
		Contexts   []struct {
			Tokens []int32   `json:"tokens"`
			Logits []float64 `json:"logits"`
		} `json:"contexts"`
	}
	if err := json.Unmarshal(js, &fx); err != nil {
		t.Fatal(err)
	}
	m, err := LoadServing(filepath.Join(dir, fx.Checkpoint))
	if err != nil {
		t.Fatal(err)
	}
	if len(fx.Contexts) == 0 {
		t.Fatal("fixture has no contexts")
	}
	out := make([]float32, m.VocabSize())
	for _, c := range fx.Contexts {
		if len(c.Logits) != m.VocabSize() {
			t.Fatalf("context %v: %d logits, vocabulary %d", c.Tokens, len(c.Logits), m.VocabSize())
		}
		m.NextLogits(c.Tokens, out)
		var worst float64
		for v, want := range c.Logits {
			worst = max(worst, math.Abs(float64(out[v])-want))
		}
		if worst > 1e-5 {
			t.Errorf("context %v: logits differ from torch's by up to %.3g", c.Tokens, worst)
		}
		t.Logf("context of %d tokens: max |Δlogit| %.2g", len(c.Tokens), worst)
	}
}
