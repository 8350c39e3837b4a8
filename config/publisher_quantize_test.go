package config

import (
	"strings"
	"testing"
)

// TestPublisherQuantize: none is the default (make run unchanged), fp8 and
// mxfp8 are accepted with mode delta, refused with another mode, an
// unknown format is refused naming the field and the allowed values, and
// the YAML key loads.
func TestPublisherQuantize(t *testing.T) {
	c := DefaultPublisher()
	if c.Quantize != QuantizeNone {
		t.Fatalf("default quantize %q", c.Quantize)
	}
	for _, q := range []Quantization{QuantizeFP8, QuantizeMXFP8} {
		c := DefaultPublisher()
		c.Quantize = q
		if err := c.Validate(); err != nil {
			t.Fatalf("%s with delta: %v", q, err)
		}
		c.Mode = PublishFull
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "publisher.quantize: "+string(q)+" needs mode delta") {
			t.Fatalf("%s with full: %v", q, err)
		}
	}
	c.Quantize = "fp4"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `publisher.quantize: "fp4" is not one of none, fp8, mxfp8`) {
		t.Fatalf("unknown quantize: %v", err)
	}
	cfg, err := Parse("q.yaml", []byte("publisher:\n  quantize: mxfp8\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Publisher.Quantize != QuantizeMXFP8 {
		t.Fatalf("loaded quantize %q", cfg.Publisher.Quantize)
	}
}

// TestQuantizeOnce: publisher.quantize and engines.quantize are each
// accepted alone, and refused together for built-in engines (they would
// quantise twice); external engines (count 0) are not the built-in ones.
func TestQuantizeOnce(t *testing.T) {
	c := Default()
	c.Publisher.Quantize = QuantizeFP8
	if err := c.Validate(); err != nil {
		t.Fatalf("publisher.quantize alone: %v", err)
	}
	c.Engines.Quantize = ServeINT4G32
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "engines.quantize: int4_g32 would quantise again the weights publisher.quantize (fp8)") {
		t.Fatalf("both set: %v", err)
	}
	c.Publisher.Quantize = QuantizeNone
	if err := c.Validate(); err != nil {
		t.Fatalf("engines.quantize alone: %v", err)
	}
}
