package config

// ServingQuantization is the weight format built-in engines serve
// (engines.quantize): each engine quantises every version it loads and
// serves the dequantised values (model.Model.Quantized).
type ServingQuantization string

// Serving quantizations.
const (
	ServeNone     ServingQuantization = "none"      // the checkpoint's BF16 weights
	ServeINT4G32  ServingQuantization = "int4_g32"  // symmetric INT4, one BF16 scale per 32 inputs
	ServeINT4G128 ServingQuantization = "int4_g128" // symmetric INT4, one BF16 scale per 128 inputs
	ServeFP8      ServingQuantization = "fp8"       // E4M3, FP32 scale per 128×128 block
	ServeMXFP8    ServingQuantization = "mxfp8"     // E4M3, E8M0 scale per 32 elements
)

// Values lists the serving quantizations.
func (ServingQuantization) Values() []string {
	return []string{"none", "int4_g32", "int4_g128", "fp8", "mxfp8"}
}

// FakeQuantization is the quantisation the built-in trainer fakes in its
// forward pass (trainer.fake_quant), with a straight-through gradient.
type FakeQuantization string

// Fake quantizations.
const (
	FakeQuantNone     FakeQuantization = "none"
	FakeQuantINT4G32  FakeQuantization = "int4_g32"
	FakeQuantINT4G128 FakeQuantization = "int4_g128"
)

// Values lists the fake quantizations.
func (FakeQuantization) Values() []string { return []string{"none", "int4_g32", "int4_g128"} }

// validateQuantizeOnce refuses publisher.quantize and engines.quantize
// together: the built-in engines would quantise again what the publisher
// already quantised (the engine loads the dequantised values), so the
// served weights carry both rounding errors and match neither the
// publisher's error metrics nor a trainer faking one of the two.
func (c Config) validateQuantizeOnce() error {
	if c.Publisher.Quantize == QuantizeNone || c.Engines.Quantize == ServeNone || c.Engines.Count <= 0 {
		return nil
	}
	v := checker{section: "engines"}
	v.fail("quantize", "%s would quantise again the weights publisher.quantize (%s) already quantised; set one of the two to none",
		c.Engines.Quantize, c.Publisher.Quantize)
	return v.err()
}
