package filter

import (
	"errors"
	"fmt"
)

// ErrInvalidConfig is wrapped by every error Config.Validate returns.
var ErrInvalidConfig = errors.New("filter: invalid config")

// ErrMaxSampleBatches is returned by Accumulator.Add when max_sample_batches
// generation batches were sampled and still too few groups were kept.
var ErrMaxSampleBatches = errors.New("filter: max_sample_batches reached")

// Mode selects the dynamic-sampling strategy.
type Mode string

const (
	// ModeNone keeps everything.
	ModeNone Mode = "none"
	// ModeFilter is DAPO dynamic sampling: drop zero-variance groups and
	// accumulate across generation batches.
	ModeFilter Mode = "filter"
	// ModeReplace is POLARIS: overwrite bad groups with copies of good ones.
	ModeReplace Mode = "replace"
	// ModeZeroVarianceMask masks (drops) groups whose live trajectories all
	// scored the same, within ZeroVarianceTol.
	ModeZeroVarianceMask Mode = "zero_variance_mask"
)

// Config configures dynamic sampling. Names follow SkyRL.
type Config struct {
	// Mode: none, filter (default), replace or zero_variance_mask.
	Mode Mode `yaml:"mode"`
	// TrainBatchSize is the number of groups (prompts) per training batch
	// (filter mode). ≥ 1.
	TrainBatchSize int `yaml:"train_batch_size"`
	// NSamplesPerPrompt (n) is the group size; n == 1 keeps every group
	// in filter and replace modes. ≥ 1.
	NSamplesPerPrompt int `yaml:"n_samples_per_prompt"`
	// MaxSampleBatches bounds the generation batches sampled for one
	// training batch in filter mode; −1 is unbounded. Default 30.
	MaxSampleBatches int `yaml:"max_sample_batches"`
	// MinReplaceRatio: replace mode replaces only if good groups > total
	// groups × MinReplaceRatio. In [0, 1]; default 0.3.
	MinReplaceRatio float64 `yaml:"min_replace_ratio"`
	// ZeroVarianceTol: zero_variance_mask treats max − min ≤ tol as zero
	// variance. ≥ 0; default 1e-6.
	ZeroVarianceTol float64 `yaml:"zero_variance_tol"`
}

// DefaultConfig returns mode filter, train_batch_size 1, n 1,
// max_sample_batches 30, min_replace_ratio 0.3, tol 1e-6.
func DefaultConfig() Config {
	return Config{Mode: ModeFilter, TrainBatchSize: 1, NSamplesPerPrompt: 1, MaxSampleBatches: 30,
		MinReplaceRatio: 0.3, ZeroVarianceTol: 1e-6}
}

// Validate names the offending field and the allowed values.
func (c Config) Validate() error {
	switch c.Mode {
	case ModeNone, ModeFilter, ModeReplace, ModeZeroVarianceMask:
	default:
		return fmt.Errorf("%w: mode must be one of none, filter, replace, zero_variance_mask; got %q", ErrInvalidConfig, c.Mode)
	}
	if c.TrainBatchSize < 1 {
		return fmt.Errorf("%w: train_batch_size must be ≥ 1, got %d", ErrInvalidConfig, c.TrainBatchSize)
	}
	if c.NSamplesPerPrompt < 1 {
		return fmt.Errorf("%w: n_samples_per_prompt must be ≥ 1, got %d", ErrInvalidConfig, c.NSamplesPerPrompt)
	}
	if c.MaxSampleBatches != -1 && c.MaxSampleBatches < 1 {
		return fmt.Errorf("%w: max_sample_batches must be −1 (unbounded) or ≥ 1, got %d", ErrInvalidConfig, c.MaxSampleBatches)
	}
	if !(c.MinReplaceRatio >= 0 && c.MinReplaceRatio <= 1) {
		return fmt.Errorf("%w: min_replace_ratio must be in [0, 1], got %v", ErrInvalidConfig, c.MinReplaceRatio)
	}
	if !(c.ZeroVarianceTol >= 0) {
		return fmt.Errorf("%w: zero_variance_tol must be ≥ 0, got %v", ErrInvalidConfig, c.ZeroVarianceTol)
	}
	return nil
}
