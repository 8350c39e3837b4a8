package config

import (
	"strings"
	"testing"
)

// TestServingQuantizeAndFakeQuant: engines.quantize and trainer.fake_quant
// default to none, load from YAML, and an unknown value (fp8 is served,
// never faked) is refused naming the field and the allowed values.
func TestServingQuantizeAndFakeQuant(t *testing.T) {
	d := Default()
	if d.Engines.Quantize != ServeNone || d.Trainer.FakeQuant != FakeQuantNone {
		t.Fatalf("defaults %q %q", d.Engines.Quantize, d.Trainer.FakeQuant)
	}
	cfg, err := Parse("q.yaml", []byte("engines:\n  quantize: int4_g128\ntrainer:\n  fake_quant: int4_g128\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Engines.Quantize != ServeINT4G128 || cfg.Trainer.FakeQuant != FakeQuantINT4G128 {
		t.Fatalf("loaded %q %q", cfg.Engines.Quantize, cfg.Trainer.FakeQuant)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"engines:\n  quantize: int4\n", `engines.quantize: "int4" is not one of none, int4_g32, int4_g128, fp8, mxfp8`},
		{"trainer:\n  fake_quant: fp8\n", `trainer.fake_quant: "fp8" is not one of none, int4_g32, int4_g128`},
	} {
		if _, err := Parse("q.yaml", []byte(tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %s", tc.yaml, err, tc.want)
		}
	}
}
