package config

// FilterConfig configures dynamic sampling: what happens to groups whose
// trajectories all scored the same (they carry no GRPO signal).
type FilterConfig struct {
	// Mode picks the dynamic-sampling algorithm.
	// A group is bad when its scores are all equal, when it holds one
	// trajectory while n_samples_per_prompt > 1, or when a score is NaN.
	Mode FilterMode `yaml:"mode" doc:"dynamic sampling (SkyRL semantics, docs/run.md): none, filter (DAPO: drop bad groups, accumulate good ones across generation batches), replace (POLARIS: fill bad groups' slots with copies of good groups) or zero_variance_mask (keep zero-variance groups, zero their loss mask)"`
	// MaxSampleBatches stops the run with an error after this many generation
	// batches (mini_batch_size finished groups each) fail to fill one
	// trainer step; the groups held for it are requeued first (-1 = never
	// give up). filter and replace modes.
	MaxSampleBatches int `yaml:"max_sample_batches" doc:"filter/replace: stop after this many generation batches (mini_batch_size finished groups each) without filling a step, requeuing the held groups; -1 = unbounded"`
	// MinReplaceRatio: replace mode only replaces when good groups exceed
	// this fraction of the generation batch; otherwise it resamples.
	MinReplaceRatio float64 `yaml:"min_replace_ratio" doc:"replace: good groups must exceed this fraction of the generation batch, else it is discarded and sampled again"`
	// ZeroVarianceTol: zero_variance_mask masks the loss of a group whose
	// live trajectories' scores differ by at most this much.
	ZeroVarianceTol float64 `yaml:"zero_variance_tol" doc:"zero_variance_mask: a group with > 1 live trajectory whose live scores span at most this has its loss mask zeroed"`
}

// DefaultFilter drops zero-variance groups (DAPO), with SkyRL's constants.
// The GRPO advantage of such a group is 0, so training on it only costs time.
func DefaultFilter() FilterConfig {
	return FilterConfig{
		Mode:             FilterFilter,
		MaxSampleBatches: 30,
		MinReplaceRatio:  0.3,
		ZeroVarianceTol:  1e-6,
	}
}

// Validate checks the filter section.
func (c FilterConfig) Validate() error {
	v := checker{section: "filter"}
	v.checkEnums(c)
	v.unboundedOrAtLeast("max_sample_batches", int64(c.MaxSampleBatches), 1)
	v.inRange("min_replace_ratio", c.MinReplaceRatio, 0, 1)
	v.nonNegativeFloat("zero_variance_tol", c.ZeroVarianceTol)
	return v.err()
}
