package config

// contextDefaults gives the fields whose default depends on what else the
// file says, after the file is decoded and before command-line overrides
// and validation. set reports whether the file gave a key path a value
// (not null). A file that sets the field itself always wins.
//
//   - engines.count: 0 when engines.external lists engines (a user who
//     brings vLLM or SGLang wants the run on them, not on two built-in
//     engines serving another model beside them).
//   - engines.external[i].weight_load: DefaultWeightLoad of the entry's
//     kind (delta for vllm and builtin, full for sglang).
//   - trainer.num_parallel_generation_workers: DefaultGenerationWorkers of
//     the file's mini_batch_size and max_staleness_steps, so changing the
//     batch alone keeps B ≤ W ≤ B·(S+1).
func contextDefaults(c *Config, set func(path string) bool) {
	if len(c.Engines.External) > 0 && !set("engines.count") {
		c.Engines.Count = 0
	}
	for i := range c.Engines.External {
		e := &c.Engines.External[i]
		if e.WeightLoad == "" {
			e.WeightLoad = DefaultWeightLoad(e.Kind)
		}
	}
	t := &c.Trainer
	if !set("trainer.num_parallel_generation_workers") && t.MiniBatchSize >= 1 && t.MaxStalenessSteps >= 0 {
		t.NumParallelGenerationWorkers = DefaultGenerationWorkers(t.MiniBatchSize, t.MaxStalenessSteps)
	}
}
