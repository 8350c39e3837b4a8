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
