package model

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// int4Fixture is integrations/torch/tests/testdata/go_int4_logits.json: the
// logits an engine with engines.quantize int4_g32 / int4_g128 serves from
// the go_serving checkpoint, which the torch worker's fake quantisation
// must reproduce (tests/test_fakequant.py).
type int4Fixture struct {
	Checkpoint string       `json:"checkpoint"`
	Source     string       `json:"source"`
	Schemes    []int4Scheme `json:"schemes"`
}

type int4Scheme struct {
	Quant    Quant         `json:"quant"`
	Contexts []int4Context `json:"contexts"`
}

type int4Context struct {
	Tokens []int32   `json:"tokens"`
	Logits []float32 `json:"logits"`
}

// TestINT4TorchFixture keeps go_int4_logits.json equal to what Go serves
// (ASYNCRL_WRITE_FIXTURES=1 rewrites it), so the torch side is checked
// against the current quantiser, not a stale copy.
func TestINT4TorchFixture(t *testing.T) {
	dir := filepath.Join("..", "integrations", "torch", "tests", "testdata")
	m, err := LoadServing(filepath.Join(dir, "go_serving"))
	if err != nil {
		t.Fatal(err)
	}
	contexts := [][]int32{{1}, {1, 40, 41, 42}, {1, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87}}
	var fx int4Fixture
	fx.Checkpoint = "go_serving"
	fx.Source = "model/int4fixture_test.go: LoadServing(go_serving).Quantized(quant).NextLogits(tokens)"
	out := make([]float32, m.VocabSize())
	for _, q := range []Quant{QuantINT4G32, QuantINT4G128} {
		qm, err := m.Quantized(q)
		if err != nil {
			t.Fatal(err)
		}
		fx.Schemes = append(fx.Schemes, int4Scheme{Quant: q})
		s := &fx.Schemes[len(fx.Schemes)-1]
		for _, c := range contexts {
			qm.NextLogits(c, out)
			s.Contexts = append(s.Contexts, int4Context{c, append([]float32(nil), out...)})
		}
	}
	path := filepath.Join(dir, "go_int4_logits.json")
	old := goldenJSON(t, path, fx)
	if len(old.Schemes) != len(fx.Schemes) {
		t.Fatalf("fixture has %d schemes, Go serves %d: rerun with ASYNCRL_WRITE_FIXTURES=1", len(old.Schemes), len(fx.Schemes))
	}
	for i, s := range fx.Schemes {
		for j, c := range s.Contexts {
			for v, x := range c.Logits {
				if math.Abs(float64(x-old.Schemes[i].Contexts[j].Logits[v])) > 1e-6 {
					t.Fatalf("%s context %d logit %d: Go serves %v, fixture has %v: rerun with ASYNCRL_WRITE_FIXTURES=1",
						s.Quant, j, v, x, old.Schemes[i].Contexts[j].Logits[v])
				}
			}
		}
	}
}

// goldenJSON returns the fixture stored at path, after writing fresh there
// first when ASYNCRL_WRITE_FIXTURES is set; the caller compares the two.
func goldenJSON[T any](t *testing.T, path string, fresh T) T {
	t.Helper()
	if os.Getenv("ASYNCRL_WRITE_FIXTURES") != "" {
		js, _ := json.MarshalIndent(fresh, "", " ")
		if err := os.WriteFile(path, append(js, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	js, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var stored T
	if err := json.Unmarshal(js, &stored); err != nil {
		t.Fatal(err)
	}
	return stored
}
