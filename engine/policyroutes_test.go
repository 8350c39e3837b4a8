package engine_test

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/messages/vllmwire"
	"github.com/asyncrl/asyncrl/model"
)

// The built-in policy is the engine's RoutesModel when it is a mixture of
// experts (model/moe.go).
var _ engine.RoutesModel = (*model.Model)(nil)

func serve(t *testing.T, m engine.Model) *httptest.Server {
	t.Helper()
	cfg := engine.DefaultConfig()
	cfg.TimeScale = 0
	e, err := engine.New(cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(func() {
		srv.Close()
		e.Close()
		http.DefaultClient.CloseIdleConnections()
	})
	return srv
}

func post(t *testing.T, srv *httptest.Server, body map[string]any) (int, []byte) {
	t.Helper()
	return postTo(t, srv, "/v1/completions", body)
}

// postTo posts body as JSON to path on srv and returns the status and body.
func postTo(t *testing.T, srv *httptest.Server, path string, body map[string]any) (int, []byte) {
	t.Helper()
	buf, _ := json.Marshal(body)
	resp, err := http.Post(srv.URL+path, "application/json", bytes.NewReader(buf))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	_, _ = out.ReadFrom(resp.Body)
	return resp.StatusCode, out.Bytes()
}

// TestPolicyMoERoutesEndToEnd: the engine serving a mixture-of-experts
// policy answers routed_experts that are the model's own routing of every
// position, and a trainer replaying them (Sequence.Routes, the last row
// padding) computes exactly the engine's output_logprobs from the same
// weights.
func TestPolicyMoERoutesEndToEnd(t *testing.T) {
	cfg := model.DefaultConfig()
	cfg.Hidden, cfg.Layers, cfg.Experts, cfg.TopK = 24, 2, 4, 2
	m, err := model.New(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, m)
	prompt := []int32{1, 40, 41, 42, 43}
	code, body := post(t, srv, map[string]any{"prompt": prompt, "max_tokens": 6, "ignore_eos": true,
		"return_token_ids": true, "return_routed_experts": true, "temperature": 1, "seed": 5})
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	var r engine.CompletionResponse
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	ch := r.Choices[0]
	if ch.RoutedExperts == nil {
		t.Fatal("no routed_experts")
	}
	rows, err := vllmwire.DecodeRoutedExperts(*ch.RoutedExperts, int32(cfg.Experts), cfg.Layers, cfg.TopK)
	if err != nil {
		t.Fatal(err)
	}
	all := append(slices.Clone(prompt), ch.TokenIDs...)
	if rows.Tokens != len(all)-1 {
		t.Fatalf("%d rows for %d tokens, want %d", rows.Tokens, len(all), len(all)-1)
	}
	if own := m.Routes(all[:len(all)-1], 0); !slices.Equal(rows.Values, own) {
		t.Fatalf("engine routes %v, the model's %v", rows.Values, own)
	}

	rl := cfg.Layers * cfg.TopK
	seq := model.Sequence{Tokens: all, LossMask: make([]uint8, len(all)), RolloutLogprobs: make([]float32, len(all)),
		Routes: append(slices.Clone(rows.Values), make([]int32, rl)...)} // last row: padding
	for i, lp := range ch.OutputLogprobs {
		seq.LossMask[len(prompt)+i] = 1
		seq.RolloutLogprobs[len(prompt)+i] = lp
	}
	tr, err := model.NewTrainer(m.Clone(), model.DefaultTrainerConfig())
	if err != nil {
		t.Fatal(err)
	}
	lps, err := tr.Logprobs(model.Batch{Sequences: []model.Sequence{seq}})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range ch.OutputLogprobs {
		if got := lps[0][len(prompt)+i]; math.Abs(float64(got-want)) > 1e-6 {
			t.Errorf("token %d: trainer (replayed) logprob %v, engine's %v", i, got, want)
		}
	}
}

// TestPolicyDenseRefusesRoutes: a dense policy has the methods but no
// routes; return_routed_experts is then a 400 as for any model without them.
func TestPolicyDenseRefusesRoutes(t *testing.T) {
	cfg := model.DefaultConfig()
	cfg.Hidden = 16
	m, err := model.New(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	code, body := post(t, serve(t, m), map[string]any{"prompt": []int32{1, 40}, "max_tokens": 2, "return_routed_experts": true})
	if code != http.StatusBadRequest || !bytes.Contains(body, []byte("return_routed_experts")) {
		t.Fatalf("dense model with return_routed_experts: %d %s", code, body)
	}
}
