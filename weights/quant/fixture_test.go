package quant_test

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/asyncrl/asyncrl/weights/quant"
	"github.com/asyncrl/asyncrl/weights/safetensors"
)

// pythonFixtureDir holds the quantised checkpoints asyncrl_vllm's pytest
// dequantises (integrations/vllm/tests/test_quant.py): per scheme, "w"
// and its scale as the publisher writes them, and "w.expected", the F32
// values Go's Dequantize serves.
const pythonFixtureDir = "../../integrations/vllm/tests/testdata"

func pythonFixture(t *testing.T, name string) []byte {
	s, _ := quant.Lookup(name)
	rows, cols := 130, 136 // partial blocks in both schemes
	r := rand.New(rand.NewPCG(5, 6))
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = float32(r.NormFloat64() * math.Pow(10, float64(i%7-3)))
	}
	w[7] = float32(math.NaN())
	wt, sc, _, err := s.Quantize("w", rows, cols, w)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Dequantize(wt, sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := []safetensors.Tensor{
		{Name: wt.Name, DType: safetensors.DType(wt.DType), Shape: wt.Shape, Data: wt.Data},
		{Name: sc.Name, DType: safetensors.DType(sc.DType), Shape: sc.Shape, Data: sc.Data},
		{Name: "w.expected", DType: safetensors.F32, Shape: wt.Shape, Data: safetensors.EncodeF32(got)},
	}
	b, err := safetensors.Marshal(ts, map[string]string{"quantization": name})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The committed fixtures are what this code writes now
// (ASYNCRL_WRITE_FIXTURES=1 rewrites them), so the Python side is tested
// against Go's current format.
func TestPythonFixtureUpToDate(t *testing.T) {
	for _, name := range []string{"fp8", "mxfp8"} {
		want := pythonFixture(t, name)
		path := filepath.Join(pythonFixtureDir, "quant_"+name+".safetensors")
		if os.Getenv("ASYNCRL_WRITE_FIXTURES") != "" {
			if err := os.MkdirAll(pythonFixtureDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s is stale: run ASYNCRL_WRITE_FIXTURES=1 go test -run TestPythonFixtureUpToDate ./weights/quant/", path)
		}
	}
}
