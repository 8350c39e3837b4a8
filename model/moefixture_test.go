package model

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The Go ↔ torch interop of the mixture of experts (model/moe.go,
// integrations/torch/asyncrl_worker/model.py MoELayer).
//
// Go → torch: testdata go_moe/ is a BF16 serving checkpoint of a mixture
// written by SaveServing, go_moe_fixture.json the logprobs (own routing),
// the routes of every position and the logprobs with other routes replayed;
// integrations/torch/tests/test_moe.py checks torch against them, and
// TestGoMoEFixture checks Go still computes them (regenerate with
// ASYNCRL_WRITE_FIXTURES=1 go test ./model -run TestGoMoEFixture).
// torch → Go: torch_moe/ and torch_moe_logits.json come from
// integrations/torch/tests/make_moe_fixture.py (TestLoadTorchMoECheckpoint).

var torchTestdata = filepath.Join("..", "integrations", "torch", "tests", "testdata")

type moeFixtureCase struct {
	Tokens []int32 `json:"tokens"`
	// Logprobs of the token after Tokens, routing itself.
	Logprobs []float64 `json:"logprobs"`
	// Routes of every position of Tokens, [len(Tokens), layers, top_k] flat.
	Routes []int32 `json:"routes"`
	// ReplayRoutes is another valid row for the last position and
	// ReplayLogprobs the logprobs of the next token with it replayed.
	ReplayRoutes   []int32   `json:"replay_routes"`
	ReplayLogprobs []float64 `json:"replay_logprobs"`
}

type moeFixture struct {
	Checkpoint string           `json:"checkpoint"`
	Source     string           `json:"source"`
	Cases      []moeFixtureCase `json:"cases"`
}

func moeFixtureModel(t *testing.T) *Model {
	t.Helper()
	cfg := Config{VocabSize: 98, Window: 4, EmbedDim: 8, Hidden: 16, Layers: 2, MaxSeqLen: 64, Experts: 4, TopK: 2}
	m, err := New(cfg, 19)
	if err != nil {
		t.Fatal(err)
	}
	for i := m.headW; i < m.headB; i++ {
		m.params[i] *= 40 // a distribution far from uniform, so a wrong expert shows
	}
	m.refresh()
	return m
}

func logSoftmax(l []float32) []float64 {
	p := make([]float64, len(l))
	lse, _ := softmaxT(l, 1, p)
	out := make([]float64, len(l))
	for i, v := range l {
		out[i] = float64(v) - lse
	}
	return out
}

func computeMoECase(m *Model, toks []int32) moeFixtureCase {
	c := moeFixtureCase{Tokens: toks, Routes: m.Routes(toks, 0)}
	ws := m.NewWorkspace()
	c.Logprobs = logSoftmax(m.Forward(toks, ws))
	rl := m.RoutesLen()
	own := c.Routes[len(c.Routes)-rl:]
	c.ReplayRoutes = make([]int32, rl)
	for i, e := range own { // another expert in every slot, still distinct per layer
		c.ReplayRoutes[i] = (e + 1) % int32(m.cfg.Experts)
	}
	c.ReplayLogprobs = logSoftmax(m.ForwardReplay(toks, c.ReplayRoutes, ws))
	return c
}

func TestGoMoEFixture(t *testing.T) {
	contexts := [][]int32{{1}, {1, 40, 41, 42}, {1, 70, 71, 72, 80, 81, 3, 4, 5}, {1, 33, 90, 12, 12, 12}}
	dir := filepath.Join(torchTestdata, "go_moe")
	fxPath := filepath.Join(torchTestdata, "go_moe_fixture.json")
	if os.Getenv("ASYNCRL_WRITE_FIXTURES") != "" {
		if err := moeFixtureModel(t).SaveServing(dir); err != nil {
			t.Fatal(err)
		}
		served, err := LoadServing(dir)
		if err != nil {
			t.Fatal(err)
		}
		fx := moeFixture{Checkpoint: "go_moe", Source: "model/moefixture_test.go: policy.New(seed 19, head ×40) saved by SaveServing (BF16), numbers from the loaded model"}
		for _, c := range contexts {
			fx.Cases = append(fx.Cases, computeMoECase(served, c))
		}
		js, _ := json.MarshalIndent(fx, "", " ")
		if err := os.WriteFile(fxPath, append(js, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	js, err := os.ReadFile(fxPath)
	if err != nil {
		t.Fatal(err)
	}
	var fx moeFixture
	if err := json.Unmarshal(js, &fx); err != nil {
		t.Fatal(err)
	}
	m, err := LoadServing(filepath.Join(torchTestdata, fx.Checkpoint))
	if err != nil {
		t.Fatal(err)
	}
	if len(fx.Cases) != len(contexts) {
		t.Fatalf("fixture has %d cases", len(fx.Cases))
	}
	for _, want := range fx.Cases {
		got := computeMoECase(m, want.Tokens)
		if !slices.Equal(got.Routes, want.Routes) || !slices.Equal(got.ReplayRoutes, want.ReplayRoutes) {
			t.Errorf("%v: routes %v / %v, fixture %v / %v", want.Tokens, got.Routes, got.ReplayRoutes, want.Routes, want.ReplayRoutes)
		}
		for v := range want.Logprobs {
			if math.Abs(got.Logprobs[v]-want.Logprobs[v]) > 1e-6 || math.Abs(got.ReplayLogprobs[v]-want.ReplayLogprobs[v]) > 1e-6 {
				t.Fatalf("%v: logprobs differ from the fixture at %d", want.Tokens, v)
			}
		}
		var d float64
		for v := range want.Logprobs {
			d = max(d, math.Abs(want.Logprobs[v]-want.ReplayLogprobs[v]))
		}
		if d < 0.05 {
			t.Errorf("%v: replaying other experts moves the logprobs by only %.3g: the fixture would not catch a replay bug", want.Tokens, d)
		}
	}
}

// TestLoadTorchMoECheckpoint: a mixture checkpoint the torch worker wrote
// loads in Go with the same logits and routes.
func TestLoadTorchMoECheckpoint(t *testing.T) {
	js, err := os.ReadFile(filepath.Join(torchTestdata, "torch_moe_logits.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Checkpoint string `json:"checkpoint"`
		Contexts   []struct {
			Tokens []int32   `json:"tokens"`
			Logits []float64 `json:"logits"`
			Routes []int32   `json:"routes"`
		} `json:"contexts"`
	}
	if err := json.Unmarshal(js, &fx); err != nil {
		t.Fatal(err)
	}
	m, err := LoadServing(filepath.Join(torchTestdata, fx.Checkpoint))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, e := m.RouteShape(); e == 0 || len(fx.Contexts) == 0 {
		t.Fatalf("torch_moe loaded as dense (%+v) or has no contexts", m.Config())
	}
	out := make([]float32, m.VocabSize())
	for _, c := range fx.Contexts {
		m.NextLogits(c.Tokens, out)
		var worst float64
		for v, want := range c.Logits {
			worst = max(worst, math.Abs(float64(out[v])-want))
		}
		if worst > 1e-4 {
			t.Errorf("context %v: logits differ from torch's by up to %.3g", c.Tokens, worst)
		}
		if got := m.Routes(c.Tokens, 0); !slices.Equal(got, c.Routes) {
			t.Errorf("context %v: routes %v, torch's %v", c.Tokens, got, c.Routes)
		}
	}
}
