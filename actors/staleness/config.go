package staleness

import (
	"errors"
	"fmt"
)

// ErrInvalidConfig is wrapped by every error Config.Validate returns.
var ErrInvalidConfig = errors.New("staleness: invalid config")

// ErrUnknownGroup is returned for a group id the controller does not hold
// (never admitted, or already settled — e.g. a duplicate delivery).
var ErrUnknownGroup = errors.New("staleness: unknown group")

// ErrWrongState is returned when an operation does not fit the group's
// current state (Accept of an accepted group, Filter of a running one...).
var ErrWrongState = errors.New("staleness: operation not allowed in group state")

// ErrStepAhead is returned by StepDone for a step beyond the current one.
var ErrStepAhead = errors.New("staleness: step done ahead of current step")

// StalePolicy says what CheckForTraining does with a group whose staleness
// exceeds MaxStalenessSteps.
type StalePolicy string

const (
	// PolicyRequeue drops the violator, releases its capacity and emits a
	// requeue of its prompt (default: the bound is enforced).
	PolicyRequeue StalePolicy = "requeue"
	// PolicyAccept trains the violator and counts the violation (SkyRL's
	// behaviour: it only counts).
	PolicyAccept StalePolicy = "accept"
)

// Measure says how CheckForTraining measures a group's staleness.
type Measure string

const (
	// MeasureScheduled is SkyRL's measure (default): global_step − the
	// step at which the group was scheduled (admitted).
	MeasureScheduled Measure = "scheduled"
	// MeasureToken is asyncrl's stricter measure: the trainer's version −
	// the policy version of the group's oldest generated token. It differs
	// from scheduled whenever an engine lags behind the trainer (its
	// tokens are older than the version the group was scheduled at).
	MeasureToken Measure = "token"
)

// Config configures a Controller. Field names follow SkyRL's fully_async
// options.
type Config struct {
	// MaxStalenessSteps (S, SkyRL max_staleness_steps) is the largest
	// allowed lag, in trainer steps, between the policy version of a
	// group's oldest token and the step that trains it. ≥ 0; default 4.
	MaxStalenessSteps int64 `yaml:"max_staleness_steps"`
	// NumParallelGenerationWorkers (W) bounds the groups generating at
	// once. Must satisfy B ≤ W ≤ B·(S+1).
	NumParallelGenerationWorkers int64 `yaml:"num_parallel_generation_workers"`
	// MiniBatchSize (B) is the number of groups one trainer step consumes.
	// ≥ 1.
	MiniBatchSize int64 `yaml:"mini_batch_size"`
	// StalePolicy is requeue (default) or accept.
	StalePolicy StalePolicy `yaml:"stale_policy"`
	// Measure is scheduled (default; "" means scheduled) or token.
	Measure Measure `yaml:"measure"`
	// BaseVersion is the policy version the trainer holds at step 1
	// (weights after 0 updates); the trainer's version at step j is
	// BaseVersion + j − 1. Default 0, SkyRL's base version.
	BaseVersion int64 `yaml:"base_version"`
}

// DefaultConfig returns S=4, B=4, W=8 (two mini-batches generating at
// once), PolicyRequeue, MeasureScheduled, BaseVersion 0.
func DefaultConfig() Config {
	return Config{
		MaxStalenessSteps:            4,
		NumParallelGenerationWorkers: 8,
		MiniBatchSize:                4,
		StalePolicy:                  PolicyRequeue,
		Measure:                      MeasureScheduled,
	}
}

// measure is the configured measure, "" read as scheduled.
func (c Config) measure() Measure {
	if c.Measure == "" {
		return MeasureScheduled
	}
	return c.Measure
}

// Validate checks the fields and SkyRL's rule B ≤ W ≤ B·(S+1): fewer
// workers than a mini-batch could never fill a step, more than B·(S+1)
// could never all be busy within the staleness bound.
func (c Config) Validate() error {
	if c.MaxStalenessSteps < 0 {
		return fmt.Errorf("%w: max_staleness_steps must be ≥ 0, got %d", ErrInvalidConfig, c.MaxStalenessSteps)
	}
	if c.MiniBatchSize < 1 {
		return fmt.Errorf("%w: mini_batch_size must be ≥ 1, got %d", ErrInvalidConfig, c.MiniBatchSize)
	}
	if c.BaseVersion < 0 {
		return fmt.Errorf("%w: base_version must be ≥ 0, got %d", ErrInvalidConfig, c.BaseVersion)
	}
	b, w, s := c.MiniBatchSize, c.NumParallelGenerationWorkers, c.MaxStalenessSteps
	if w < b || w > b*(s+1) {
		return fmt.Errorf("%w: need mini_batch_size ≤ num_parallel_generation_workers ≤ mini_batch_size·(max_staleness_steps+1), got B=%d W=%d S=%d (allowed W in [%d, %d])",
			ErrInvalidConfig, b, w, s, b, b*(s+1))
	}
	switch c.StalePolicy {
	case PolicyRequeue, PolicyAccept:
	default:
		return fmt.Errorf("%w: stale_policy must be %q or %q, got %q", ErrInvalidConfig, PolicyRequeue, PolicyAccept, c.StalePolicy)
	}
	switch c.Measure {
	case "", MeasureScheduled, MeasureToken:
	default:
		return fmt.Errorf("%w: measure must be %q or %q, got %q", ErrInvalidConfig, MeasureScheduled, MeasureToken, c.Measure)
	}
	return nil
}
