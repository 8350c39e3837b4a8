package engine

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default: %v", err)
	}
	bad := map[string]func(*Config){
		"name":       func(c *Config) { c.ServedModelName = "" },
		"maxlen":     func(c *Config) { c.MaxModelLen = 1 },
		"defmax":     func(c *Config) { c.DefaultMaxTokens = 0 },
		"timescale":  func(c *Config) { c.TimeScale = -1 },
		"cache":      func(c *Config) { c.Latency.CacheBlocks = 10 },
		"latency":    func(c *Config) { c.Latency.MaxNumSeqs = 0 },
		"block_size": func(c *Config) { c.Latency.BlockSize = 0 },
	}
	for name, f := range bad {
		c := DefaultConfig()
		f(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err = %v", name, err)
		}
		if _, err := New(c, nil); err == nil {
			t.Errorf("%s: New accepted an invalid config", name)
		}
	}
}

func TestConfigYAML(t *testing.T) {
	src := []byte("served_model_name: p\nmax_model_len: 256\ntime_scale: 0.5\nlatency:\n  max_num_seqs: 3\n  decode_base: 7ms\n")
	c := DefaultConfig()
	dec := yaml.NewDecoder(bytes.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		t.Fatal(err)
	}
	if c.ServedModelName != "p" || c.MaxModelLen != 256 || c.TimeScale != 0.5 || c.Latency.MaxNumSeqs != 3 ||
		c.Latency.DecodeBase != 7*time.Millisecond || c.Latency.BlockSize != 16 {
		t.Fatalf("decoded %+v", c)
	}
	dec = yaml.NewDecoder(bytes.NewReader([]byte("max_num_seq: 3\n")))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err == nil {
		t.Fatal("unknown key accepted")
	}
}
