package config

// FilterConfig configures dynamic sampling: what happens to groups whose
// trajectories all scored the same (they carry no GRPO signal).
type FilterConfig struct {
	// Mode picks the dynamic-sampling algorithm.
	Mode FilterMode `yaml:"mode" doc:"dynamic sampling: none, filter (DAPO: drop zero-variance groups), replace (POLARIS: overwrite them with good groups) or zero_variance_mask (mask their loss)"`
	// MaxSampleBatches stops the run with an error after this many generation
	// batches fail to yield a full mini-batch (-1 = never give up).
	MaxSampleBatches int `yaml:"max_sample_batches" doc:"give up after this many generation batches without a full mini-batch; -1 = unbounded"`
	// MinReplaceRatio: replace mode only resamples a batch when good groups
	// are at most this fraction of it.
	MinReplaceRatio float64 `yaml:"min_replace_ratio" doc:"replace mode: good groups must exceed this fraction of the batch, else resample"`
	// ZeroVarianceTol: zero_variance_mask drops a group whose live scores
	// differ by at most this much.
	ZeroVarianceTol float64 `yaml:"zero_variance_tol" doc:"zero_variance_mask: a group whose scores span at most this is dropped"`
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
