package config

// validateRanks checks exec_ranks on its own: a group only runs on the
// exec backend, its DP size is the microbatcher's, and its rendezvous
// needs a bound.
func (c TrainerConfig) validateRanks(v *checker) {
	v.atLeast("exec_ranks", int64(c.ExecRanks), 1)
	v.positiveDuration("exec_rendezvous_timeout", c.ExecRendezvousTimeout)
	if c.ExecRanks <= 1 {
		return
	}
	if c.Backend != BackendExec {
		v.fail("exec_ranks", "%d ranks need backend exec (the ranks are copies of trainer.exec); got backend %s", c.ExecRanks, c.Backend)
	}
	if c.DPSize != 1 && c.DPSize != c.ExecRanks {
		v.fail("dp_size", "%d but exec_ranks is %d: the microbatcher splits each mini-batch over the exec ranks; leave dp_size at 1 or set it to %d", c.DPSize, c.ExecRanks, c.ExecRanks)
	}
}

// DPRanks is the number of data-parallel ranks the microbatcher plans
// for: exec_ranks for a group of trainer children, else dp_size.
func (c TrainerConfig) DPRanks() int {
	if c.Backend == BackendExec && c.ExecRanks > 1 {
		return c.ExecRanks
	}
	return c.DPSize
}

// validateRankBatch: every rank of a group trains the same number of
// sequences (the all-reduce sums equal shares), so the global batch —
// mini_batch_size groups of n_samples_per_prompt — must divide by the
// world size.
func (c Config) validateRankBatch() error {
	t := c.Trainer
	if t.Backend != BackendExec || t.ExecRanks <= 1 {
		return nil
	}
	b := int64(t.MiniBatchSize) * int64(c.Rollout.NSamplesPerPrompt)
	if b <= 0 || b%int64(t.ExecRanks) == 0 {
		return nil
	}
	v := checker{section: "trainer"}
	v.fail("exec_ranks", "%d ranks do not divide the global batch of mini_batch_size·rollout.n_samples_per_prompt = %d·%d = %d sequences: every rank trains an equal share; pick a world size that divides %d",
		t.ExecRanks, t.MiniBatchSize, c.Rollout.NSamplesPerPrompt, b, b)
	return v.err()
}
