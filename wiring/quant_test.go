package wiring

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine"
	pmodel "github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/model/tokenizer"
)

// TestEngineQuantizeServesFakeQuant: a built-in engine with
// engines.quantize int4_g32 reports, over its HTTP API, the logprobs of
// the trainer with trainer.fake_quant int4_g32 on the same BF16 weights
// (up to the engine's float32 log-softmax), while a dense trainer is off
// by the quantisation; engines.quantize none adds no option.
func TestEngineQuantizeServesFakeQuant(t *testing.T) {
	if EngineQuantize(config.ServeNone) != nil {
		t.Fatal("engines.quantize none: an engine option")
	}
	m, _ := pmodel.New(pmodel.DefaultConfig(), 21)
	m.RoundBF16()
	cfg := engine.DefaultConfig()
	cfg.TimeScale = 0
	e, err := engine.New(cfg, m.Clone(), EngineQuantize(config.ServeINT4G32)...)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	srv := httptest.NewServer(e.Handler())
	defer srv.Close()
	defer http.DefaultClient.CloseIdleConnections()

	prompt := append([]int32{tokenizer.BOS}, tokenizer.Encode("abc")...)
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 24, "logprobs": 0,
		"return_token_ids": true, "ignore_eos": true, "seed": 5, "temperature": 1})
	resp, err := http.Post(srv.URL+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var cr engine.CompletionResponse
	if err := json.NewDecoder(resp.Body).Decode(&cr); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d: %v", resp.StatusCode, err)
	}
	ch := cr.Choices[0]
	seq := pmodel.Sequence{Tokens: append(append([]int32{}, prompt...), ch.TokenIDs...)}
	seq.LossMask = make([]uint8, len(seq.Tokens))
	seq.RolloutLogprobs = make([]float32, len(seq.Tokens))
	for i, lp := range ch.Logprobs.TokenLogprobs {
		seq.LossMask[len(prompt)+i] = 1
		seq.RolloutLogprobs[len(prompt)+i] = lp
	}
	b := pmodel.Batch{Sequences: []pmodel.Sequence{seq}}
	diff := func(fake config.FakeQuantization) float64 {
		c := PolicyTrainer(config.Default())
		c.FakeQuant = string(fake)
		c.Temperature = 1
		tr, err := pmodel.NewTrainer(m.Clone(), c)
		if err != nil {
			t.Fatal(err)
		}
		lps, err := tr.Logprobs(b)
		if err != nil {
			t.Fatal(err)
		}
		var sum float64
		for i, mk := range seq.LossMask {
			if mk != 0 {
				sum += math.Abs(float64(lps[0][i] - seq.RolloutLogprobs[i]))
			}
		}
		return sum / float64(len(ch.TokenIDs))
	}
	fq, dense := diff(config.FakeQuantINT4G32), diff(config.FakeQuantNone)
	t.Logf("%d tokens: mean |Δlogprob| vs the INT4 engine: fake-quant trainer %.3g, dense trainer %.3g", len(ch.TokenIDs), fq, dense)
	if len(ch.TokenIDs) != 24 || fq > 1e-5 || dense < 100*fq || dense < 1e-4 {
		t.Fatalf("fake-quant %.3g, dense %.3g over %d tokens", fq, dense, len(ch.TokenIDs))
	}
}
