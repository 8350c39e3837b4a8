package engine

import (
	"bytes"
	"encoding/json"
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
		"maxlen":     func(c *Config) { c.MaxModelLen = -1 },
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

func TestMaxModelLenFromModel(t *testing.T) {
	cfg := testConfig()
	cfg.MaxModelLen = 0
	cfg.Latency.CacheBlocks = 4 // 64 tokens
	h := newHarness(t, cfg)
	h.m.MaxLen = 100
	if _, out := h.get("/v1/models"); !bytes.Contains(out, []byte(`"max_model_len":100`)) {
		t.Fatalf("models: %s", out)
	}
	if code, _, out := h.post("/v1/completions", map[string]any{"prompt": string(make([]byte, 100)), "max_tokens": 1}); code != 400 {
		t.Fatalf("over the model's limit: %d %s", code, out)
	}
	// Fits the model's context but not the modelled KV cache: 400, not 500.
	code, _, out := h.post("/v1/completions", map[string]any{"prompt": "abc", "max_tokens": 80})
	if d := errorBody(t, out); code != 400 || *d.Param != "max_tokens" {
		t.Fatalf("over the cache: %d %s", code, out)
	}
	h.complete(map[string]any{"prompt": "abc", "max_tokens": 40})
	// Chat without max_tokens fills what the cache can hold, not the
	// model's 100-token context.
	code, _, out = h.post("/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": "hi"}}, "ignore_eos": true})
	var r ChatResponse
	json.Unmarshal(out, &r)
	if code != 200 || r.Usage.TotalTokens != 64 {
		t.Fatalf("chat default max_tokens: %d %s", code, out)
	}
}
