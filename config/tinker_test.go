package config

import (
	"strings"
	"testing"
)

// tinker.sampler_weights takes adapter or version; anything else is an
// error naming the key and the allowed values.
func TestTinkerSamplerWeights(t *testing.T) {
	for _, m := range []SamplerWeightsMode{SamplerAdapter, SamplerVersion} {
		c := DefaultTinker()
		c.SamplerWeights = m
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", m, err)
		}
	}
	c := DefaultTinker()
	c.SamplerWeights = "full"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "tinker.sampler_weights") || !strings.Contains(err.Error(), "adapter, version") {
		t.Fatalf("err = %v", err)
	}
}
