package config

// ModelArch is a Hugging Face architecture asyncrl runs end to end
// (docs/models.md): its config.json model_type.
type ModelArch string

// The supported architectures.
const (
	ArchNone       ModelArch = ""
	ArchQwen3      ModelArch = "qwen3"
	ArchQwen3MoE   ModelArch = "qwen3_moe"
	ArchLlama      ModelArch = "llama"
	ArchDeepSeekV3 ModelArch = "deepseek_v3"
)

// Values lists the architectures ("" is none: the built-in policy, or the
// architecture model.path's config.json names).
func (ModelArch) Values() []string { return []string{"", "qwen3", "qwen3_moe", "llama", "deepseek_v3"} }

// ModelPreset is a size of `asyncrl model init`.
type ModelPreset string

// Presets.
const (
	PresetTiny  ModelPreset = "tiny"
	PresetSmall ModelPreset = "small"
)

// Values lists the presets.
func (ModelPreset) Values() []string { return []string{"tiny", "small"} }

// ModelConfig is the model a run trains and its built-in engines serve:
// the built-in policy (the default: path and arch empty; its shape is the
// policy section), or a Hugging Face checkpoint of a supported
// architecture — given (path), or random-initialised at the start of the
// run (arch, preset, tokenizer: what `asyncrl model init` writes). A
// Hugging Face model is trained by the PyTorch worker (trainer.backend
// exec), served by the built-in engines (model/transformer) or external
// ones, tokenised by its own tokenizer and prompted through its chat
// template.
type ModelConfig struct {
	// Path is a Hugging Face checkpoint directory (config.json,
	// safetensors, tokenizer files). With arch set and path missing, the
	// random-initialised checkpoint is written there and reused by later
	// runs.
	Path string `yaml:"path" doc:"Hugging Face checkpoint directory (qwen3, qwen3_moe, llama, deepseek_v3; docs/models.md); empty = the built-in policy, or with arch a fresh checkpoint under run.data_dir"`
	// Arch random-initialises a checkpoint of this architecture when path
	// is empty or does not exist yet.
	Arch ModelArch `yaml:"arch" doc:"random-initialise a checkpoint of this architecture at the start (asyncrl model init) when path is empty or missing: qwen3, qwen3_moe, llama, deepseek_v3"`
	// Preset is the size of that checkpoint.
	Preset ModelPreset `yaml:"preset" doc:"size of the random-initialised checkpoint: tiny or small (asyncrl model init --preset)"`
	// Tokenizer is the tokenizer directory (tokenizer.json,
	// tokenizer_config.json) copied into the random-initialised
	// checkpoint; its vocabulary sizes the embedding.
	Tokenizer string `yaml:"tokenizer" doc:"tokenizer directory (tokenizer.json + tokenizer_config.json) copied into the random-initialised checkpoint; required with arch"`
}

// DefaultModel is the built-in policy.
func DefaultModel() ModelConfig { return ModelConfig{Preset: PresetTiny} }

// HF reports whether the run's model is a Hugging Face checkpoint (given
// or initialised) rather than the built-in policy.
func (c ModelConfig) HF() bool { return c.Path != "" || c.Arch != ArchNone }

// Validate checks the model section on its own.
func (c ModelConfig) Validate() error {
	v := checker{section: "model"}
	v.checkEnums(c)
	if c.Arch != ArchNone && c.Tokenizer == "" {
		v.fail("tokenizer", "required with arch %s: a tokenizer directory holding tokenizer.json and tokenizer_config.json (make tokenizers fetches Qwen3's, Llama-3.1's and DeepSeek-V3's into .cache/tokenizers)", c.Arch)
	}
	return v.err()
}

// validateModel: a Hugging Face model is trained by a trainer child (the
// built-in trainer trains only the built-in policy) and has its own shape
// (the policy section's experts do not apply).
func (c Config) validateModel() error {
	if !c.Model.HF() {
		if c.Trainer.InitCheckpoint != "" && c.Trainer.Backend == BackendExec {
			t := checker{section: "trainer"}
			t.fail("init_checkpoint", "with backend exec it is a Hugging Face checkpoint the child starts from (e.g. an SFT run's <sft.output_dir>/latest/serving): set the model section (model.path or model.arch) too")
			return t.err()
		}
		return nil
	}
	v := checker{section: "model"}
	if c.Trainer.Backend == BackendBuiltin {
		v.fail("path", "a Hugging Face model is trained by the PyTorch worker: set trainer.backend: exec with trainer.exec: [/usr/bin/python3, -m, asyncrl_worker] and exec_env: [PYTHONPATH=integrations/torch] (the built-in trainer trains only the built-in policy)")
	}
	if c.Policy.Experts != 0 {
		v.fail("path", "policy.experts shapes the built-in policy; a Hugging Face model's experts come from its config.json: remove policy.experts and policy.top_k")
	}
	return v.err()
}
