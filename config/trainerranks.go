package config

import "fmt"

// validateRanks checks exec_ranks and exec_nodes on their own: a group
// only runs on the exec backend, its DP size is the microbatcher's, and
// its rendezvous needs a bound.
func (c TrainerConfig) validateRanks(v *checker) {
	v.atLeast("exec_ranks", int64(c.ExecRanks), 1)
	v.atLeast("exec_nodes", int64(c.ExecNodes), 1)
	v.positiveDuration("exec_rendezvous_timeout", c.ExecRendezvousTimeout)
	if c.ExecNodes > 1 && c.Backend != BackendExec {
		v.fail("exec_nodes", "%d nodes need backend exec (the ranks are copies of trainer.exec); got backend %s", c.ExecNodes, c.Backend)
	}
	w := c.ExecWorld()
	if w <= 1 {
		return
	}
	if c.Backend != BackendExec {
		v.fail("exec_ranks", "%d ranks need backend exec (the ranks are copies of trainer.exec); got backend %s", c.ExecRanks, c.Backend)
	}
	if c.DPSize != 1 && c.DPSize != w {
		v.fail("dp_size", "%d but the exec group's world size (exec_ranks·exec_nodes) is %d: the microbatcher splits each mini-batch over the exec ranks; leave dp_size at 1 or set it to %d", c.DPSize, w, w)
	}
}

// ExecWorld is the exec backend's world size: exec_ranks on each of
// exec_nodes nodes (1: one child).
func (c TrainerConfig) ExecWorld() int { return max(c.ExecRanks, 1) * max(c.ExecNodes, 1) }

// DPRanks is the number of data-parallel ranks the microbatcher plans
// for: the world size of a group of trainer children, else dp_size.
func (c TrainerConfig) DPRanks() int {
	if w := c.ExecWorld(); c.Backend == BackendExec && w > 1 {
		return w
	}
	return c.DPSize
}

// validateRankBatch: every rank of a group trains the same number of
// sequences (the all-reduce sums equal shares), so the global batch —
// mini_batch_size groups of n_samples_per_prompt — must divide by the
// world size.
func (c Config) validateRankBatch() error {
	t := c.Trainer
	w := t.ExecWorld()
	if t.Backend != BackendExec || w <= 1 {
		return nil
	}
	b := int64(t.MiniBatchSize) * int64(c.Rollout.NSamplesPerPrompt)
	if b <= 0 || b%int64(w) == 0 {
		return nil
	}
	v := checker{section: "trainer"}
	field, of := "exec_ranks", ""
	if t.ExecNodes > 1 {
		field, of = "exec_nodes", fmt.Sprintf(" (exec_ranks %d · exec_nodes %d)", t.ExecRanks, t.ExecNodes)
	}
	v.fail(field, "%d ranks%s do not divide the global batch of mini_batch_size·rollout.n_samples_per_prompt = %d·%d = %d sequences: every rank trains an equal share; pick a world size that divides %d",
		w, of, t.MiniBatchSize, c.Rollout.NSamplesPerPrompt, b, b)
	return v.err()
}
