package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestTrainerExecBackend(t *testing.T) {
	c, err := Parse("exec.yaml", []byte("trainer:\n  backend: exec\n  exec: [/usr/bin/python3, -m, asyncrl_worker]\n"+
		"  exec_env: [PYTHONPATH=integrations/torch]\n  exec_step_timeout: 90s\n  exec_restarts: 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	tc := c.Trainer
	if tc.Backend != BackendExec || strings.Join(tc.Exec, " ") != "/usr/bin/python3 -m asyncrl_worker" ||
		tc.ExecEnv[0] != "PYTHONPATH=integrations/torch" || tc.ExecStepTimeout != 90*time.Second || tc.ExecRestarts != 0 {
		t.Fatalf("parsed %+v", tc)
	}
	if d := DefaultTrainer(); d.ExecStepTimeout != 10*time.Minute || d.ExecRestarts != 3 {
		t.Errorf("defaults: step timeout %v, restarts %d", d.ExecStepTimeout, d.ExecRestarts)
	}
	for yaml, want := range map[string]string{
		"trainer:\n  backend: exec\n":         "trainer.exec: required with backend exec",
		"trainer:\n  exec_env: [NOEQUALS]\n":  "trainer.exec_env[0]: want KEY=VALUE",
		"trainer:\n  exec_restarts: -1\n":     "trainer.exec_restarts",
		"trainer:\n  exec_step_timeout: 0s\n": "trainer.exec_step_timeout",
	} {
		_, err := Parse("bad.yaml", []byte(yaml))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", yaml, err, want)
		}
	}
	// Frames v1 carry support sets (TrainBatch arrays.support, issue 19).
	if _, err := Parse("ok.yaml", []byte("trainer:\n  backend: exec\n  exec: [w]\n  normalize_over_support: true\n")); err != nil {
		t.Errorf("exec with normalize_over_support: %v", err)
	}
}
