package config

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/asyncrl/asyncrl/internal/netx"
)

// EnginesConfig describes the inference engines: how many built-in engines
// to start, which external (vLLM) engines to use, and the built-in engine's
// scheduler limits and latency model.
type EnginesConfig struct {
	// Count is the number of built-in engines started by the run.
	// Its default depends on the file: 2, or 0 when the file lists
	// engines.external and does not set count (engines the user brought
	// serve their own model; built-in ones beside them would not).
	Count int `yaml:"count" doc:"number of built-in engines the run starts (0 = external engines only); left out: 2, or 0 when engines.external lists engines"`
	// ListenHost is the address built-in engines bind (each on a free port).
	ListenHost string `yaml:"listen_host" doc:"host the built-in engines bind, each on a free port"`
	// ExternalURLs are engines started elsewhere (vLLM or asyncrl engine),
	// e.g. http://10.0.0.5:8000; they are routed to alongside built-in ones.
	ExternalURLs []string `yaml:"external_urls" doc:"base URLs of engines the run only routes to (their weights are someone else's to update), e.g. http://10.0.0.5:8000; engines the run drives are listed under external"`
	// External are engines started elsewhere (vLLM, SGLang or asyncrl
	// engine) that the run drives over their HTTP APIs: it pauses them,
	// loads every version into them, resumes them and routes to them only
	// once they serve a version within the staleness budget.
	External []ExternalEngine `yaml:"external" doc:"engines started elsewhere that the run drives over HTTP (weights included): a list of {url, kind, model, tokenizer, weight_load, api_key_file}, url and kind required; see docs/engines.md"`
	// ServedModelName is the model name the built-in engines serve and the
	// rollouts send; external engines must serve it too.
	ServedModelName string `yaml:"served_model_name" doc:"model name the built-in engines serve and rollouts request (vLLM --served-model-name); external engines must serve it"`
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
	// APIKeyFile holds the built-in engines' API key: every route wants
	// "Authorization: Bearer <key>", and the run's router and drivers send
	// it. Required when listen_host is off loopback. The same file on
	// every node (each node's router reaches the others' engines).
	APIKeyFile string `yaml:"api_key_file" doc:"file holding the built-in engines' API key (Authorization: Bearer, as vLLM --api-key); required when listen_host is off loopback; never printed"`
	// WeightRoots bound where built-in engines load weights from; a load
	// outside them is refused before it is opened. Empty: the run's own
	// directories only decide (loopback use).
	WeightRoots []string `yaml:"weight_roots" doc:"directories the built-in engines may load weights and LoRA adapters from (empty = any path; set it when engines are reachable by others)"`
	// Quantize makes built-in engines quantise every version they load
	// and serve the dequantised weights (what an INT4 or FP8 kernel
	// computes with): the linear weights only, embedding and biases stay
	// BF16. Pair int4 with trainer.fake_quant to keep the train–inference
	// mismatch low (BENCHMARKS.md).
	Quantize ServingQuantization `yaml:"quantize" doc:"weights built-in engines serve: none (BF16), int4_g32 / int4_g128 (symmetric INT4, BF16 scale per 32/128 inputs), fp8 (E4M3, 128x128 blocks) or mxfp8; quantised on every load"`
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
		WeightRoots:       []string{},
		ExternalURLs:      []string{},
		External:          []ExternalEngine{},
		ServedModelName:   "asyncrl-policy",
		MaxNumSeqs:        16,
		MaxModelLen:       0,
		MaxWaiting:        256,
		TimeScale:         0.1,
		PrefillUSPerToken: 40,
		DecodeUSPerToken:  10000,
		DecodeBatchSlope:  50,
		PrefixCacheBlocks: 1024,
		BlockSize:         16,
		Quantize:          ServeNone,
	}
}

// Validate checks the engines section.
func (c EnginesConfig) Validate() error {
	v := checker{section: "engines"}
	v.checkEnums(c)
	v.atLeast("count", int64(c.Count), 0)
	if c.Count >= 0 && c.Count+len(c.ExternalURLs)+len(c.External) < 1 {
		v.fail("", "no engines: set count ≥ 1 or list external (or external_urls)")
	}
	v.notEmpty("served_model_name", c.ServedModelName)
	c.validateExternal(&v)
	v.notEmpty("listen_host", c.ListenHost)
	if c.Count > 0 && c.ListenHost != "" && c.APIKeyFile == "" && !netx.IsLoopback(c.ListenHost) {
		v.fail("api_key_file", "required when listen_host %q is off loopback: anyone who reaches the engines could pause them or load weights", c.ListenHost)
	}
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

// EngineKind is which server an external engine is: it picks the driver.
type EngineKind string

// Engine kinds.
const (
	EngineVLLM    EngineKind = "vllm"    // vLLM's OpenAI server with its dev-mode RL routes
	EngineSGLang  EngineKind = "sglang"  // SGLang's HTTP server
	EngineBuiltin EngineKind = "builtin" // asyncrl engine: speaks vLLM's routes
)

// Values lists the engine kinds.
func (EngineKind) Values() []string { return []string{"vllm", "sglang", "builtin"} }

// WeightLoad is how a driven engine receives a new version.
type WeightLoad string

// Weight loads.
const (
	// LoadDelta: the engine applies each SkyRL-format delta in place (vLLM
	// with asyncrl_vllm's worker extension; the built-in engine).
	LoadDelta WeightLoad = "delta"
	// LoadFull: the engine loads a full Hugging Face checkpoint directory
	// the node rebuilt from the deltas (same file system as the node).
	LoadFull WeightLoad = "full"
	// LoadLoRA: the engine loads each version as a LoRA adapter in place.
	LoadLoRA WeightLoad = "lora"
)

// Values lists the weight loads.
func (WeightLoad) Values() []string { return []string{"delta", "full", "lora"} }

// DefaultWeightLoad is the weight load of an engine of kind k whose entry
// leaves weight_load out: delta for vLLM (the run's engines.md recipe
// starts it with asyncrl_vllm's worker extension, which applies deltas in
// place; a gap or a refused delta falls back to full in the same pause)
// and for the built-in engine (which applies them natively); full for
// SGLang, which can only load a checkpoint from disk. "" for an unknown
// kind (validation names the kinds).
func DefaultWeightLoad(k EngineKind) WeightLoad {
	switch k {
	case EngineVLLM, EngineBuiltin:
		return LoadDelta
	case EngineSGLang:
		return LoadFull
	}
	return ""
}

// EffectiveLoad is e.WeightLoad, or its kind's DefaultWeightLoad when
// empty (an entry built in Go rather than loaded from a file).
func (e ExternalEngine) EffectiveLoad() WeightLoad {
	if e.WeightLoad == "" {
		return DefaultWeightLoad(e.Kind)
	}
	return e.WeightLoad
}

// ExternalEngine is one engine the run drives over HTTP.
type ExternalEngine struct {
	// URL is the engine's base URL, e.g. http://10.0.0.5:8000.
	URL string `yaml:"url" doc:"engine base URL, e.g. http://10.0.0.5:8000"`
	// Kind picks the driver.
	Kind EngineKind `yaml:"kind" doc:"which server it is: vllm (vllm serve), sglang (sglang.launch_server) or builtin (asyncrl engine); required"`
	// Model is the served model name; empty means engines.served_model_name.
	Model string `yaml:"model" doc:"served model name (empty = engines.served_model_name, which it must equal)"`
	// Tokenizer is the engine's model's Hugging Face tokenizer: its
	// tokenizer.json, or the directory holding it (and tokenizer_config.json
	// with the chat template, which rollout.chat_template needs); empty
	// means the built-in character tokenizer (the built-in policy).
	Tokenizer string `yaml:"tokenizer" doc:"the model's Hugging Face tokenizer: tokenizer.json or its directory (with tokenizer_config.json for rollout.chat_template); empty = the built-in policy's character vocabulary"`
	// WeightLoad is how new versions reach it.
	WeightLoad WeightLoad `yaml:"weight_load" doc:"how versions reach it: delta (applied in place: vLLM with asyncrl_vllm's worker extension, builtin), full (the checkpoint directory; SGLang's only way) or lora; left out: delta for vllm and builtin, full for sglang"`
	// APIKeyFile holds the key the engine was started with (vLLM
	// --api-key); the drivers and the router send it as a bearer token.
	APIKeyFile string `yaml:"api_key_file" doc:"file holding the engine's API key (vLLM --api-key), sent as Authorization: Bearer; never printed"`
}

// validateExternal checks engines.external: every entry a driven engine
// with a URL, one model and one tokenizer for the whole run (the router
// forwards one request body to any replica).
func (c EnginesConfig) validateExternal(v *checker) {
	seen := map[string]int{}
	for i, e := range c.External {
		f := fmt.Sprintf("external[%d]", i)
		u, err := url.Parse(e.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.fail(f+".url", "%q is not an http:// or https:// URL with a host", e.URL)
		}
		if j, dup := seen[e.URL]; dup {
			v.fail(f+".url", "%s is also external[%d]: list each engine once", e.URL, j)
		}
		seen[e.URL] = i
		switch {
		case e.Kind == "":
			v.fail(f+".kind", "required: say which server it is: vllm (vllm serve), sglang (python -m sglang.launch_server) or builtin (asyncrl engine)")
		case !slices.Contains(EngineKind("").Values(), string(e.Kind)):
			v.fail(f+".kind", "%q is not one of %s: vllm (vllm serve), sglang (python -m sglang.launch_server) or builtin (asyncrl engine)", e.Kind, strings.Join(EngineKind("").Values(), ", "))
		}
		if e.WeightLoad != "" && !slices.Contains(WeightLoad("").Values(), string(e.WeightLoad)) {
			v.fail(f+".weight_load", "%q is not one of %s: delta (vLLM with asyncrl_vllm's worker extension, builtin), full (any engine that reads the run's directories) or lora; or leave it out for the kind's default", e.WeightLoad, strings.Join(WeightLoad("").Values(), ", "))
		}
		if e.Kind == EngineSGLang && e.WeightLoad == LoadDelta {
			v.fail(f+".weight_load", "SGLang cannot apply asyncrl deltas in place; use full, or leave weight_load out (full is SGLang's default: it loads the checkpoint from disk with /update_weights_from_disk)")
		}
		if e.Model != "" && e.Model != c.ServedModelName {
			v.fail(f+".model", "%q differs from engines.served_model_name %q: rollouts send one model name through the router to every engine; set engines.served_model_name: %s and leave model out", e.Model, c.ServedModelName, e.Model)
		}
		if i > 0 && e.Tokenizer != c.External[0].Tokenizer {
			v.fail(f+".tokenizer", "%q differs from external[0].tokenizer %q: every engine of a run serves one model; give every entry the same tokenizer", e.Tokenizer, c.External[0].Tokenizer)
		}
	}
}
