package config

import (
	"fmt"
	"net/url"
)

// EnginesConfig describes the inference engines: how many built-in engines
// to start, which external (vLLM) engines to use, and the built-in engine's
// scheduler limits and latency model.
type EnginesConfig struct {
	// Count is the number of built-in engines started by the run.
	Count int `yaml:"count" doc:"number of built-in engines the run starts (0 = external engines only)"`
	// ListenHost is the address built-in engines bind (each on a free port).
	ListenHost string `yaml:"listen_host" doc:"host the built-in engines bind, each on a free port"`
	// ExternalURLs are engines started elsewhere (vLLM or asyncrl engine),
	// e.g. http://10.0.0.5:8000; they are routed to alongside built-in ones.
	ExternalURLs []string `yaml:"external_urls" doc:"base URLs of engines started elsewhere (vLLM or asyncrl engine), e.g. http://10.0.0.5:8000"`
	// MaxNumSeqs caps the sequences decoded together (vLLM max_num_seqs).
	MaxNumSeqs int `yaml:"max_num_seqs" doc:"most sequences decoded together per engine (vLLM max_num_seqs)"`
	// MaxModelLen caps prompt+output tokens; 0 uses the model's own limit.
	MaxModelLen int `yaml:"max_model_len" doc:"most prompt+output tokens per sequence; 0 = the model's own limit"`
	// MaxWaiting bounds the queue behind MaxNumSeqs; beyond it requests get 429.
	MaxWaiting int `yaml:"max_waiting" doc:"requests queued behind max_num_seqs before the engine answers 429"`
	// TimeScale multiplies every modelled duration before the engine sleeps
	// it; 0 never sleeps (tests), 1 plays the model in real time.
	TimeScale float64 `yaml:"time_scale" doc:"factor applied to modelled durations before sleeping (0 = never sleep, 1 = real time)"`
	// PrefillUSPerToken is the modelled cost of each uncached prompt token.
	PrefillUSPerToken float64 `yaml:"prefill_us_per_token" doc:"modelled microseconds per uncached prompt token"`
	// DecodeUSPerToken is the modelled cost of one decode step of one sequence.
	DecodeUSPerToken float64 `yaml:"decode_us_per_token" doc:"modelled microseconds of one decode step (one token per running sequence)"`
	// DecodeBatchSlope is the extra cost of a decode step per running
	// sequence: step = decode_us_per_token + decode_batch_slope·batch.
	DecodeBatchSlope float64 `yaml:"decode_batch_slope" doc:"extra microseconds per decode step per running sequence (step = decode_us_per_token + slope·batch)"`
	// PrefixCacheBlocks is each engine's KV/prefix cache capacity in blocks.
	PrefixCacheBlocks int `yaml:"prefix_cache_blocks" doc:"KV/prefix cache capacity per engine, in blocks"`
	// BlockSize is the tokens per cache block (vLLM uses 16).
	BlockSize int `yaml:"block_size" doc:"tokens per prefix cache block (vLLM: 16)"`
}

// DefaultEngines starts 2 built-in engines: the fewest that exercise routing
// and weight-sync gating, and as many as 2 CPU cores can run side by side.
// The costs are those of engine/latency's defaults, a ~7B model on one GPU
// (40 µs per prefill token, 10 ms per decode step, +50 µs per running
// sequence); time_scale 0.1 plays them 10× faster so `make run` stays short
// while the ratios routing depends on (cache hit vs miss, batch vs latency)
// are kept.
func DefaultEngines() EnginesConfig {
	return EnginesConfig{
		Count:             2,
		ListenHost:        "127.0.0.1",
		ExternalURLs:      []string{},
		MaxNumSeqs:        16,
		MaxModelLen:       0,
		MaxWaiting:        256,
		TimeScale:         0.1,
		PrefillUSPerToken: 40,
		DecodeUSPerToken:  10000,
		DecodeBatchSlope:  50,
		PrefixCacheBlocks: 1024,
		BlockSize:         16,
	}
}

// Validate checks the engines section.
func (c EnginesConfig) Validate() error {
	v := checker{section: "engines"}
	v.atLeast("count", int64(c.Count), 0)
	if c.Count >= 0 && c.Count+len(c.ExternalURLs) < 1 {
		v.fail("", "no engines: set count ≥ 1 or list external_urls")
	}
	v.notEmpty("listen_host", c.ListenHost)
	for i, raw := range c.ExternalURLs {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.fail(fmt.Sprintf("external_urls[%d]", i), "%q is not an http:// or https:// URL with a host", raw)
		}
	}
	v.atLeast("max_num_seqs", int64(c.MaxNumSeqs), 1)
	v.atLeast("max_model_len", int64(c.MaxModelLen), 0)
	v.atLeast("max_waiting", int64(c.MaxWaiting), 0)
	v.nonNegativeFloat("time_scale", c.TimeScale)
	v.nonNegativeFloat("prefill_us_per_token", c.PrefillUSPerToken)
	v.nonNegativeFloat("decode_us_per_token", c.DecodeUSPerToken)
	v.nonNegativeFloat("decode_batch_slope", c.DecodeBatchSlope)
	v.atLeast("prefix_cache_blocks", int64(c.PrefixCacheBlocks), 1)
	v.atLeast("block_size", int64(c.BlockSize), 1)
	// Like vLLM, refuse a cache that cannot hold one full-length sequence:
	// such an engine would queue that request forever.
	if c.MaxModelLen > 0 && c.PrefixCacheBlocks >= 1 && c.BlockSize >= 1 &&
		int64(c.PrefixCacheBlocks)*int64(c.BlockSize) < int64(c.MaxModelLen) {
		v.fail("prefix_cache_blocks", "%d blocks × %d tokens = %d tokens cannot hold one max_model_len (%d) sequence",
			c.PrefixCacheBlocks, c.BlockSize, c.PrefixCacheBlocks*c.BlockSize, c.MaxModelLen)
	}
	return v.err()
}
