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

// tinker.trainer: builtin or exec; exec needs trainer_exec; env entries are
// KEY=VALUE.
func TestTinkerTrainer(t *testing.T) {
	c := DefaultTinker()
	if c.Trainer != TinkerTrainerBuiltin {
		t.Fatalf("default trainer %q", c.Trainer)
	}
	c.Trainer = TinkerTrainerExec
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "tinker.trainer_exec") {
		t.Fatalf("exec without argv: %v", err)
	}
	c.TrainerExec = []string{"/usr/bin/python3", "-m", "asyncrl_worker"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.TrainerExecEnv = []string{"PYTHONPATH"}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "tinker.trainer_exec_env[0]") {
		t.Fatalf("bad env: %v", err)
	}
	c = DefaultTinker()
	c.Trainer = "torch"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "tinker.trainer") || !strings.Contains(err.Error(), "builtin, exec") {
		t.Fatalf("unknown trainer: %v", err)
	}
}

// tinker.base_models: strict YAML entries; base_model picks the served one
// (the only one when empty); each entry names a checkpoint or an
// architecture with its tokenizer; a Hugging Face base trains in a child.
func TestTinkerBaseModels(t *testing.T) {
	ok := `
tinker:
  trainer: exec
  trainer_exec: [/usr/bin/python3, -m, asyncrl_worker]
  base_models:
    - {name: Qwen/Qwen3-0.6B, path: /models/Qwen3-0.6B}
    - {name: asyncrl/qwen3-tiny, arch: qwen3, preset: tiny, tokenizer: .cache/tokenizers/qwen3, tokenizer_id: Qwen/Qwen3-0.6B}
  base_model: asyncrl/qwen3-tiny
`
	c, err := Parse("t.yaml", []byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	s := c.Tinker.Served()
	if s == nil || s.Name != "asyncrl/qwen3-tiny" || s.Arch != ArchQwen3 || s.TokenizerID != "Qwen/Qwen3-0.6B" {
		t.Fatalf("served %+v", s)
	}
	if _, err := Parse("t.yaml", []byte(strings.Replace(ok, "tokenizer_id:", "tokenizer_name:", 1))); err == nil || !strings.Contains(err.Error(), "tokenizer_name") {
		t.Fatalf("unknown key in an entry: %v", err)
	}
	for _, tc := range []struct {
		edit func(*TinkerConfig)
		want string
	}{
		{func(c *TinkerConfig) { c.BaseModel = "" }, "tinker.base_model: required with 2 base_models"},
		{func(c *TinkerConfig) { c.BaseModel = "Qwen/Qwen3-8B" }, `"Qwen/Qwen3-8B" is not in base_models (Qwen/Qwen3-0.6B, asyncrl/qwen3-tiny)`},
		{func(c *TinkerConfig) { c.Trainer = TinkerTrainerBuiltin }, "tinker.trainer: base model asyncrl/qwen3-tiny is a Hugging Face checkpoint"},
		{func(c *TinkerConfig) { c.BaseModels[0].Name = "asyncrl/qwen3-tiny" }, "base_models[1].name: \"asyncrl/qwen3-tiny\" is also base_models[0]"},
		{func(c *TinkerConfig) { c.BaseModels[0].Path = "" }, "base_models[0].path: required"},
		{func(c *TinkerConfig) { c.BaseModels[1].Tokenizer = "" }, "base_models[1].tokenizer: required with arch qwen3"},
		{func(c *TinkerConfig) { c.BaseModels[1].Arch = "gpt2" }, "base_models[1].arch: \"gpt2\" is not one of qwen3, qwen3_moe, llama, deepseek_v3"},
		{func(c *TinkerConfig) { c.BaseModels[1].Preset = "huge" }, "base_models[1].preset"},
		{func(c *TinkerConfig) { c.BaseWeights = "/ckpt" }, "tinker.base_weights"},
		{func(c *TinkerConfig) { c.BaseModels = c.BaseModels[:1]; c.BaseModel = "" }, ""},
	} {
		tc2 := c.Tinker
		tc2.BaseModels = append([]TinkerBaseModel(nil), c.Tinker.BaseModels...)
		tc.edit(&tc2)
		err := tc2.Validate()
		if tc.want == "" {
			if err != nil || tc2.Served() == nil || tc2.Served().Name != "Qwen/Qwen3-0.6B" {
				t.Errorf("one entry, base_model empty: err %v, served %+v", err, tc2.Served())
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want %q, got %v", tc.want, err)
		}
	}
}
