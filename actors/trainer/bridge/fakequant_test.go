package bridge

import (
	"testing"

	"github.com/asyncrl/asyncrl/model"
)

// TestInitFakeQuant: trainer.fake_quant travels in Init.loss only when it
// is on (a child that does not know the key refuses it rather than train
// dense), the built-in child reads it back, and a format the trainer
// cannot fake is a bad field.
func TestInitFakeQuant(t *testing.T) {
	tc := model.DefaultTrainerConfig()
	in, err := InitFor(tc, true, "hf", "/nowhere", "/out")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := in.Loss["fake_quant"]; ok {
		t.Fatal("fake_quant sent while off")
	}
	tc.FakeQuant = string(model.QuantINT4G128)
	in, _ = InitFor(tc, true, "hf", "/nowhere", "/out")
	if in.Loss["fake_quant"] != "int4_g128" {
		t.Fatalf("loss.fake_quant = %v", in.Loss["fake_quant"])
	}
	back, _, cerr := trainerConfigOf(in)
	if cerr != nil || back.FakeQuant != "int4_g128" {
		t.Fatalf("built-in child read fake_quant %q (%v)", back.FakeQuant, cerr)
	}
	in.Loss["fake_quant"] = "fp8"
	if _, _, cerr := trainerConfigOf(in); cerr == nil || cerr.Code != CodeBadField {
		t.Fatalf("fake_quant fp8: %v, want a bad field", cerr)
	}
	in.Loss["fake_quant"] = 4
	if _, _, cerr := trainerConfigOf(in); cerr == nil || cerr.Field != "loss.fake_quant" {
		t.Fatalf("fake_quant 4: %v, want bad field loss.fake_quant", cerr)
	}
}
