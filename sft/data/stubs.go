package data

import (
	"context"
	"fmt"
)

// DefaultConfig: a shuffled sampler, seed 0, endless.
func DefaultConfig() Config {
	return Config{Sampler: SamplerConfig{Kind: "shuffle", Temperature: 1}}
}

// Validate checks the config without touching files.
func (c Config) Validate() error { return fmt.Errorf("validate: %w", ErrNotImplemented) }

// Open opens the datasets and the sampler's stream.
func Open(ctx context.Context, cfg Config) (Stream, error) {
	return nil, fmt.Errorf("open: %w", ErrNotImplemented)
}

// Pack packs examples into bins.
func Pack(examples []Example, cfg PackConfig) ([]Bin, error) {
	return nil, fmt.Errorf("pack: %w", ErrNotImplemented)
}
