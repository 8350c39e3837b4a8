package config

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
)

// TinkerConfig configures `asyncrl tinker serve`, the Tinker-compatible API
// server (docs/tinker.md). The run's engines section says which built-in
// engines it starts when engine_urls is empty; run.seed seeds a fresh base
// model.
type TinkerConfig struct {
	// Listen is the API address. A non-loopback address needs an API key
	// (--api-key or ASYNCRL_TINKER_API_KEY).
	Listen string `yaml:"listen" doc:"Tinker API address (host:port); a non-loopback address needs an API key"`
	// BaseModel is the name clients pass as base_model; empty = the
	// engines' served_model_name. With base_models it names the entry
	// served (empty: the only entry).
	BaseModel string `yaml:"base_model" doc:"base model name clients create models on; empty = engines.served_model_name; with base_models: the entry served (empty = the only one)"`
	// BaseWeights is a serving checkpoint of the built-in policy; empty = a
	// fresh model from run.seed.
	BaseWeights string `yaml:"base_weights" doc:"serving checkpoint DIR of the built-in policy base model; empty = a fresh built-in policy from run.seed (a Hugging Face checkpoint goes under base_models)"`
	// BaseModels is the catalog of Hugging Face base models (qwen3,
	// qwen3_moe, llama, deepseek_v3): each a checkpoint directory, or one
	// random-initialised at the start, served under its Hugging Face name.
	// base_model picks the one served (empty with one entry: that one);
	// empty catalog = the built-in policy.
	BaseModels []TinkerBaseModel `yaml:"base_models" doc:"Hugging Face base models: a list of {name, path, arch, preset, tokenizer, tokenizer_id} (docs/tinker.md \"Base models\"); base_model picks the served one (empty with one entry: that one); empty = the built-in policy; needs trainer exec"`
	// DataDir holds checkpoints (tinker:// paths) and the JetStream store of
	// training futures; empty = <run.data_dir>/tinker.
	DataDir string `yaml:"data_dir" doc:"checkpoints and the training-future store; empty = <run.data_dir>/tinker"`
	// EngineURLs are vLLM-compatible engines to sample on; empty starts
	// engines.count built-in engines in the server's process.
	EngineURLs []string `yaml:"engine_urls" doc:"vLLM-compatible engine base URLs to sample on; empty = start engines.count built-in engines"`
	// SessionTimeout unloads a session's models when no heartbeat arrived
	// for this long (SkyRL: 300 s; the SDK beats every 10 s).
	SessionTimeout time.Duration `yaml:"session_timeout" doc:"a session without a heartbeat for this long is closed and its models unloaded"`
	// LongPoll is how long one retrieve_future call waits for a result
	// before answering try_again (the SDK's own call timeout is 45 s).
	LongPoll time.Duration `yaml:"long_poll" doc:"longest wait of one retrieve_future call before it answers try_again"`
	// SampleResultTTL is how long a finished sample result is kept.
	SampleResultTTL time.Duration `yaml:"sample_result_ttl" doc:"how long a finished sample result stays retrievable"`
	// SampleResultMaxBytes bounds the memory of finished sample results;
	// the oldest are evicted first.
	SampleResultMaxBytes int64 `yaml:"sample_result_max_bytes" doc:"memory bound of finished sample results (oldest evicted first)"`
	// SampleQueue bounds sample requests waiting for an engine slot; a full
	// queue answers 429.
	SampleQueue int `yaml:"sample_queue" doc:"sample requests waiting for an engine slot (429 when full)"`
	// SampleConcurrency bounds the requests in flight to the engines.
	SampleConcurrency int `yaml:"sample_concurrency" doc:"sample requests in flight to the engines at once"`
	// SampleEngineWait is how long a sample waits while no engine can take
	// it (none added yet, all unhealthy, all behind the published
	// version) before its future fails; 0 fails it at once.
	SampleEngineWait time.Duration `yaml:"sample_engine_wait" doc:"how long a sample waits while no engine can take it before its future fails (0 = at once)"`
	// MaxRequestBytes caps a request body (413 above).
	MaxRequestBytes int64 `yaml:"max_request_bytes" doc:"largest request body accepted (413 above)"`
	// MaxModelsPerSession caps create_model per session.
	MaxModelsPerSession int `yaml:"max_models_per_session" doc:"models one session may hold"`
	// MaxPendingPerSession caps a session's unfinished futures (429 above).
	MaxPendingPerSession int `yaml:"max_pending_per_session" doc:"unfinished futures one session may hold (429 above)"`
	// MaxLoRARank caps lora_config.rank.
	MaxLoRARank int `yaml:"max_lora_rank" doc:"largest lora_config.rank accepted"`
	// SamplerWeights says how save_weights_for_sampler reaches the engines:
	// adapter loads each checkpoint as a LoRA adapter beside the base
	// (several models and checkpoints served at once); version publishes
	// it as the engines' next weight version, a full checkpoint load, and
	// raises the router's minimum version to it (one model: sampling never
	// reaches an engine that has not loaded it).
	SamplerWeights SamplerWeightsMode `yaml:"sampler_weights" doc:"how save_weights_for_sampler reaches the engines: adapter (a LoRA adapter per checkpoint, many models side by side) or version (the engines' next weight version, the router's version gate; one model)"`
	// Trainer is the training backend: builtin (tinker/gotrain, in
	// process) or exec (one trainer child per model over the worker
	// bridge, tinker/bridgetrain; e.g. the PyTorch worker).
	Trainer TinkerTrainer `yaml:"trainer" doc:"training backend: builtin (the Go policy in process) or exec (one trainer child per model over the worker bridge, e.g. the PyTorch worker)"`
	// TrainerExec is the child's command and arguments (trainer exec), as
	// trainer.exec: it must speak the ForwardBackward and OptimStep frames.
	TrainerExec []string `yaml:"trainer_exec" doc:"trainer exec: the child's argv, e.g. [/usr/bin/python3, -m, asyncrl_worker]; it speaks the worker-bridge frames incl. ForwardBackward/OptimStep"`
	// TrainerExecEnv is added to the child's environment (KEY=VALUE).
	TrainerExecEnv []string `yaml:"trainer_exec_env" doc:"trainer exec: KEY=VALUE entries added to the child's environment (e.g. PYTHONPATH=integrations/torch)"`
	// TrainerExecTimeout bounds each call to the child; a child that misses
	// it is killed and the model must be reloaded from a saved state.
	TrainerExecTimeout time.Duration `yaml:"trainer_exec_timeout" doc:"trainer exec: a call the child does not answer within this fails; the child is killed and the model needs load_state"`
}

// TinkerBaseModel is one entry of tinker.base_models: a Hugging Face
// checkpoint served and trained under a Hugging Face name, so the SDK's
// get_tokenizer() loads its tokenizer (AutoTokenizer.from_pretrained of
// get_info's model_data.tokenizer_id, or of the sampler's base_model).
type TinkerBaseModel struct {
	// Name is what clients pass as base_model, e.g. Qwen/Qwen3-0.6B.
	Name string `yaml:"name" doc:"the name clients pass as base_model, e.g. Qwen/Qwen3-0.6B (the SDK's SamplingClient.get_tokenizer loads the tokenizer of this name)"`
	// Path is the checkpoint directory; with arch set and path missing or
	// empty, a random-initialised checkpoint is written there (empty:
	// <data_dir>/models/<arch>-<preset>-seed<run.seed>).
	Path string `yaml:"path" doc:"Hugging Face checkpoint directory (config.json, safetensors); with arch and no checkpoint there, one is random-initialised there (empty = <tinker.data_dir>/models/<arch>-<preset>-seed<run.seed>)"`
	// Arch random-initialises a checkpoint of this architecture when there
	// is none at path (asyncrl model init).
	Arch ModelArch `yaml:"arch" doc:"random-initialise a checkpoint of this architecture when path holds none: qwen3, qwen3_moe, llama, deepseek_v3"`
	// Preset is the size of that checkpoint.
	Preset ModelPreset `yaml:"preset" doc:"size of the random-initialised checkpoint: tiny or small (empty = tiny)"`
	// Tokenizer is the tokenizer directory copied into a random-initialised
	// checkpoint (its vocabulary sizes the embedding).
	Tokenizer string `yaml:"tokenizer" doc:"tokenizer directory (tokenizer.json + tokenizer_config.json) copied into the random-initialised checkpoint; required with arch"`
	// TokenizerID is get_info's model_data.tokenizer_id, what the SDK's
	// TrainingClient.get_tokenizer loads; empty = name.
	TokenizerID string `yaml:"tokenizer_id" doc:"get_info's tokenizer_id, what TrainingClient.get_tokenizer passes to AutoTokenizer.from_pretrained (a Hugging Face id or a directory); empty = name"`
}

// Served is the catalog entry the server serves: the one base_model names,
// or the only one when base_model is empty; nil for the built-in policy
// (an empty catalog) or when base_model names none (Validate refuses it).
func (c TinkerConfig) Served() *TinkerBaseModel {
	for i := range c.BaseModels {
		if c.BaseModels[i].Name == c.BaseModel || (c.BaseModel == "" && len(c.BaseModels) == 1) {
			return &c.BaseModels[i]
		}
	}
	return nil
}

// TinkerTrainer is tinker.trainer.
type TinkerTrainer string

// Tinker training backends.
const (
	TinkerTrainerBuiltin TinkerTrainer = "builtin"
	TinkerTrainerExec    TinkerTrainer = "exec"
)

// Values lists the Tinker training backends.
func (TinkerTrainer) Values() []string { return []string{"builtin", "exec"} }

// SamplerWeightsMode is tinker.sampler_weights.
type SamplerWeightsMode string

// Sampler weight modes.
const (
	SamplerAdapter SamplerWeightsMode = "adapter"
	SamplerVersion SamplerWeightsMode = "version"
)

// Values lists the sampler weight modes.
func (SamplerWeightsMode) Values() []string { return []string{"adapter", "version"} }

// DefaultTinker serves on 127.0.0.1:8100 with SkyRL's session timeout and
// room for 131,072 sample futures in flight.
func DefaultTinker() TinkerConfig {
	return TinkerConfig{
		Listen:               "127.0.0.1:8100",
		EngineURLs:           []string{},
		BaseModels:           []TinkerBaseModel{},
		SessionTimeout:       300 * time.Second,
		LongPoll:             20 * time.Second,
		SampleResultTTL:      10 * time.Minute,
		SampleResultMaxBytes: 1 << 30,
		SampleQueue:          262144,
		SampleConcurrency:    256,
		SampleEngineWait:     30 * time.Second,
		MaxRequestBytes:      64 << 20,
		MaxModelsPerSession:  16,
		MaxPendingPerSession: 262144,
		MaxLoRARank:          128,
		SamplerWeights:       SamplerAdapter,
		Trainer:              TinkerTrainerBuiltin,
		TrainerExec:          []string{},
		TrainerExecEnv:       []string{},
		TrainerExecTimeout:   10 * time.Minute,
	}
}

// Validate checks the tinker section.
func (c TinkerConfig) Validate() error {
	v := checker{section: "tinker"}
	v.hostPort("listen", c.Listen, false)
	for i, u := range c.EngineURLs {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			v.fail("engine_urls", "entry %d %q is not an http:// or https:// URL with a host", i, u)
		}
	}
	v.positiveDuration("session_timeout", c.SessionTimeout)
	v.positiveDuration("long_poll", c.LongPoll)
	if c.LongPoll >= 45*time.Second {
		v.fail("long_poll", "must be under the SDK's 45 s call timeout, got %s", formatDuration(c.LongPoll))
	}
	v.positiveDuration("sample_result_ttl", c.SampleResultTTL)
	v.atLeast("sample_result_max_bytes", c.SampleResultMaxBytes, 1<<20)
	v.atLeast("sample_queue", int64(c.SampleQueue), 1)
	v.atLeast("sample_concurrency", int64(c.SampleConcurrency), 1)
	if c.SampleEngineWait < 0 {
		v.fail("sample_engine_wait", "must be ≥ 0, got %s", formatDuration(c.SampleEngineWait))
	}
	v.atLeast("max_request_bytes", c.MaxRequestBytes, 1<<10)
	v.atLeast("max_models_per_session", int64(c.MaxModelsPerSession), 1)
	v.atLeast("max_pending_per_session", int64(c.MaxPendingPerSession), 1)
	v.atLeast("max_lora_rank", int64(c.MaxLoRARank), 1)
	v.positiveDuration("trainer_exec_timeout", c.TrainerExecTimeout)
	for i, kv := range c.TrainerExecEnv {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			v.fail(fmt.Sprintf("trainer_exec_env[%d]", i), "want KEY=VALUE, got %q", kv)
		}
	}
	if c.Trainer == TinkerTrainerExec && (len(c.TrainerExec) == 0 || c.TrainerExec[0] == "") {
		v.fail("trainer_exec", "required with trainer exec: the child's command, e.g. [/usr/bin/python3, -m, asyncrl_worker]")
	}
	c.validateBaseModels(&v)
	v.checkEnums(c)
	return v.err()
}

// validateBaseModels: every entry named once, a checkpoint or an
// architecture to create one (with its tokenizer); base_model names the
// served entry; a Hugging Face base model trains in a trainer child.
func (c TinkerConfig) validateBaseModels(v *checker) {
	seen := map[string]int{}
	for i, m := range c.BaseModels {
		f := fmt.Sprintf("base_models[%d]", i)
		if m.Name == "" {
			v.fail(f+".name", "required: the name clients pass as base_model, e.g. Qwen/Qwen3-0.6B")
		} else if j, dup := seen[m.Name]; dup {
			v.fail(f+".name", "%q is also base_models[%d]: list each base model once", m.Name, j)
		}
		seen[m.Name] = i
		if m.Path == "" && m.Arch == ArchNone {
			v.fail(f+".path", "required: a Hugging Face checkpoint directory, or arch (with tokenizer) to random-initialise one")
		}
		if !slices.Contains(ModelArch("").Values(), string(m.Arch)) {
			v.fail(f+".arch", "%q is not one of %s", m.Arch, strings.Join(ModelArch("").Values()[1:], ", "))
		}
		if m.Preset != "" && !slices.Contains(ModelPreset("").Values(), string(m.Preset)) {
			v.fail(f+".preset", "%q is not one of %s", m.Preset, strings.Join(ModelPreset("").Values(), ", "))
		}
		if m.Arch != ArchNone && m.Tokenizer == "" {
			v.fail(f+".tokenizer", "required with arch %s: a tokenizer directory holding tokenizer.json and tokenizer_config.json (make tokenizers fetches Qwen3's, Llama-3.1's and DeepSeek-V3's into .cache/tokenizers)", m.Arch)
		}
	}
	if len(c.BaseModels) == 0 {
		return
	}
	served := c.Served()
	switch {
	case served == nil && c.BaseModel == "":
		v.fail("base_model", "required with %d base_models: name the one to serve", len(c.BaseModels))
	case served == nil:
		v.fail("base_model", "%q is not in base_models (%s): name one of them, or leave base_model empty with one entry", c.BaseModel, strings.Join(c.baseModelNames(), ", "))
	case c.Trainer != TinkerTrainerExec:
		v.fail("trainer", "base model %s is a Hugging Face checkpoint, which the PyTorch worker trains: set trainer: exec with trainer_exec: [/usr/bin/python3, -m, asyncrl_worker] and trainer_exec_env: [PYTHONPATH=integrations/torch] (builtin trains only the built-in policy)", served.Name)
	}
	if served != nil && c.BaseWeights != "" {
		v.fail("base_weights", "is the built-in policy's checkpoint; base model %s comes from base_models: drop base_weights", served.Name)
	}
}

func (c TinkerConfig) baseModelNames() []string {
	var out []string
	for _, m := range c.BaseModels {
		out = append(out, m.Name)
	}
	return out
}
