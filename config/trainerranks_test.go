package config

import (
	"strings"
	"testing"
)

// TestExecRanksRules: a worker group (on one node or several) needs the exec backend, a dp_size
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
		{"two nodes of two ranks", func(c *Config) { exec(c); c.Trainer.ExecRanks, c.Trainer.ExecNodes = 2, 2 }, ""},
		{"two nodes of one rank", func(c *Config) { exec(c); c.Trainer.ExecNodes = 2 }, ""},
		{"zero nodes", func(c *Config) { exec(c); c.Trainer.ExecNodes = 0 }, "trainer.exec_nodes"},
		{"nodes on the builtin backend", func(c *Config) { c.Trainer.ExecNodes = 2 }, "2 nodes need backend exec"},
		{"dp_size is not the world", func(c *Config) { exec(c); c.Trainer.ExecRanks, c.Trainer.ExecNodes, c.Trainer.DPSize = 2, 2, 2 }, "world size (exec_ranks·exec_nodes) is 4"},
		// 3 nodes × 2 ranks = 6 does not divide 32
		{"world of nodes does not divide the batch", func(c *Config) { exec(c); c.Trainer.ExecRanks, c.Trainer.ExecNodes = 2, 3 }, "trainer.exec_nodes: 6 ranks (exec_ranks 2 · exec_nodes 3) do not divide"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.edit(&c)
			err := c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if w := c.Trainer.ExecRanks * c.Trainer.ExecNodes; c.Trainer.DPRanks() != w {
					t.Errorf("DPRanks %d, want exec_ranks·exec_nodes %d", c.Trainer.DPRanks(), w)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}
