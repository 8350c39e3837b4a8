package model

import (
	"math"
	"path/filepath"
	"slices"
	"testing"
)

// int4MoEFixture is integrations/torch/tests/testdata/go_moe_int4.json:
// what an engine with engines.quantize int4_g32 / int4_g128 serves from the
// go_moe mixture checkpoint (LoadServing(go_moe).Quantized(q)) — the
// tensors quantised, the logprobs and routes of each context under the
// engine's own routing, and the logprobs with other experts replayed at the
// last position — which the torch worker's fake quantisation of the same
// checkpoint must reproduce (tests/test_fakequant.py).
type int4MoEFixture struct {
	Checkpoint string          `json:"checkpoint"`
	Source     string          `json:"source"`
	Schemes    []int4MoEScheme `json:"schemes"`
}

type int4MoEScheme struct {
	Quant Quant `json:"quant"`
	// Quantized is Model.QuantizedTensors: which tensors the engine
	// quantises (the others are served BF16).
	Quantized []string         `json:"quantized"`
	Cases     []moeFixtureCase `json:"cases"`
}

// TestINT4MoETorchFixture keeps go_moe_int4.json equal to what Go serves
// (ASYNCRL_WRITE_FIXTURES=1 rewrites it) and checks the quantisation shows
// in it: the served logprobs differ from the BF16 checkpoint's.
func TestINT4MoETorchFixture(t *testing.T) {
	m, err := LoadServing(filepath.Join(torchTestdata, "go_moe"))
	if err != nil {
		t.Fatal(err)
	}
	contexts := [][]int32{{1}, {1, 40, 41, 42}, {1, 70, 71, 72, 80, 81, 3, 4, 5}, {1, 33, 90, 12, 12, 12}}
	fx := int4MoEFixture{Checkpoint: "go_moe",
		Source: "model/int4moefixture_test.go: LoadServing(go_moe).Quantized(quant), numbers as go_moe_fixture.json's"}
	for _, q := range []Quant{QuantINT4G32, QuantINT4G128} {
		qm, err := m.Quantized(q)
		if err != nil {
			t.Fatal(err)
		}
		s := int4MoEScheme{Quant: q, Quantized: qm.QuantizedTensors()}
		for i, c := range contexts {
			s.Cases = append(s.Cases, computeMoECase(qm, c))
			var d float64
			for v, lp := range computeMoECase(m, c).Logprobs {
				d = max(d, math.Abs(lp-s.Cases[i].Logprobs[v]))
			}
			if d < 1e-3 {
				t.Errorf("%s %v: quantised logprobs within %.2g of BF16's: the fixture would not tell them apart", q, c, d)
			}
		}
		fx.Schemes = append(fx.Schemes, s)
	}
	path := filepath.Join(torchTestdata, "go_moe_int4.json")
	old := goldenJSON(t, path, fx)
	if len(old.Schemes) != len(fx.Schemes) {
		t.Fatalf("fixture has %d schemes, Go serves %d: rerun with ASYNCRL_WRITE_FIXTURES=1", len(old.Schemes), len(fx.Schemes))
	}
	for i, s := range fx.Schemes {
		o := old.Schemes[i]
		if o.Quant != s.Quant || !slices.Equal(o.Quantized, s.Quantized) || len(o.Cases) != len(s.Cases) {
			t.Fatalf("%s: fixture has %s quantising %v, Go quantises %v: rerun with ASYNCRL_WRITE_FIXTURES=1", s.Quant, o.Quant, o.Quantized, s.Quantized)
		}
		for j, c := range s.Cases {
			oc := o.Cases[j]
			if !slices.Equal(c.Routes, oc.Routes) || !slices.Equal(c.ReplayRoutes, oc.ReplayRoutes) {
				t.Fatalf("%s %v: routes differ from the fixture: rerun with ASYNCRL_WRITE_FIXTURES=1", s.Quant, c.Tokens)
			}
			for v := range c.Logprobs {
				if math.Abs(c.Logprobs[v]-oc.Logprobs[v]) > 1e-6 || math.Abs(c.ReplayLogprobs[v]-oc.ReplayLogprobs[v]) > 1e-6 {
					t.Fatalf("%s %v: logprob %d differs from the fixture: rerun with ASYNCRL_WRITE_FIXTURES=1", s.Quant, c.Tokens, v)
				}
			}
		}
	}
}
