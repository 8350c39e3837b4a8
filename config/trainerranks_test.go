package config

import (
	"strings"
	"testing"
)

// TestExecRanksRules: a worker group needs the exec backend, a dp_size
// that agrees, a rendezvous bound, and a global batch (B·n sequences) its
// world size divides; each refusal names the field and the fix.
func TestExecRanksRules(t *testing.T) {
	exec := func(c *Config) {
		c.Trainer.Backend = BackendExec
		c.Trainer.Exec = []string{"/usr/bin/python3", "-m", "asyncrl_worker"}
	}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string // "" = valid
	}{
		{"two ranks", func(c *Config) { exec(c); c.Trainer.ExecRanks = 2 }, ""},
		{"dp_size equal", func(c *Config) { exec(c); c.Trainer.ExecRanks, c.Trainer.DPSize = 2, 2 }, ""},
		{"zero ranks", func(c *Config) { exec(c); c.Trainer.ExecRanks = 0 }, "trainer.exec_ranks"},
		{"builtin backend", func(c *Config) { c.Trainer.ExecRanks = 2 }, "need backend exec"},
		{"dp_size disagrees", func(c *Config) { exec(c); c.Trainer.ExecRanks, c.Trainer.DPSize = 2, 4 }, "trainer.dp_size"},
		{"no rendezvous bound", func(c *Config) { exec(c); c.Trainer.ExecRanks, c.Trainer.ExecRendezvousTimeout = 2, 0 }, "exec_rendezvous_timeout"},
		// B·n = 4·8 = 32 sequences: 3 ranks cannot share them equally
		{"world does not divide the batch", func(c *Config) { exec(c); c.Trainer.ExecRanks = 3 }, "3 ranks do not divide the global batch of mini_batch_size·rollout.n_samples_per_prompt = 4·8 = 32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.edit(&c)
			err := c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if c.Trainer.DPRanks() != c.Trainer.ExecRanks {
					t.Errorf("DPRanks %d, want exec_ranks %d", c.Trainer.DPRanks(), c.Trainer.ExecRanks)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}
