package config

import (
	"errors"
	"strings"
	"testing"
)

func hfRun(mod func(*Config)) error {
	c := Default()
	c.Model = ModelConfig{Arch: ArchQwen3, Preset: PresetTiny, Tokenizer: "/tok"}
	c.Trainer.Backend = BackendExec
	c.Trainer.Exec = []string{"/usr/bin/python3", "-m", "asyncrl_worker"}
	mod(&c)
	return c.Validate()
}

func TestModelSection(t *testing.T) {
	if err := hfRun(func(*Config) {}); err != nil {
		t.Fatalf("a random-initialised qwen3 on the exec backend: %v", err)
	}
	if err := hfRun(func(c *Config) { c.Model = ModelConfig{Path: "/models/qwen3", Preset: PresetTiny} }); err != nil {
		t.Fatalf("a given checkpoint: %v", err)
	}
	// R3 on a Hugging Face model: the shape comes from its config.json
	if err := hfRun(func(c *Config) { c.Rollout.RoutedExperts = RoutedExpertsConfig{Enabled: true} }); err != nil {
		t.Fatalf("routed_experts from the model: %v", err)
	}
	for _, tc := range []struct {
		name      string
		mod       func(*Config)
		field, in string
	}{
		{"builtin trainer", func(c *Config) { c.Trainer.Backend = BackendBuiltin }, "model.path", "trainer.backend: exec"},
		{"no tokenizer", func(c *Config) { c.Model.Tokenizer = "" }, "model.tokenizer", "tokenizer.json"},
		{"unknown arch", func(c *Config) { c.Model.Arch = "mixtral" }, "model.arch", "qwen3_moe"},
		{"unknown preset", func(c *Config) { c.Model.Preset = "huge" }, "model.preset", "small"},
		{"built-in experts", func(c *Config) { c.Policy = PolicyConfig{Experts: 4, TopK: 2} }, "model.path", "policy.experts"},
		{"routes from a built-in model", func(c *Config) {
			c.Model = DefaultModel()
			c.Trainer.Backend = BackendBuiltin
			c.Rollout.RoutedExperts = RoutedExpertsConfig{Enabled: true}
		}, "rollout.routed_experts.layers", "Hugging Face model"},
	} {
		err := hfRun(tc.mod)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), tc.in) {
			t.Errorf("%s: got %v, want an error naming %s that mentions %q", tc.name, err, tc.field, tc.in)
		}
	}
}

// The default run is the built-in policy: no model section needed.
func TestDefaultModelIsBuiltin(t *testing.T) {
	if m := Default().Model; m.HF() {
		t.Fatalf("default model %+v is a Hugging Face model", m)
	}
}
