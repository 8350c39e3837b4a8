package data

import (
	"errors"
	"fmt"
	"math"
)

// DefaultConfig is a shuffled sampler (seed 0, endless, temperature 1 for
// a mixture without weights), no vocabulary check, no length limit, and
// no datasets: a run's config must name at least one.
func DefaultConfig() Config {
	return Config{Sampler: SamplerConfig{Kind: "shuffle", Temperature: 1, BlockRows: DefaultBlockRows, Window: DefaultWindowBlocks}}
}

// ErrConfig is wrapped by every config validation error.
var ErrConfig = errors.New("sft/data: invalid config")

// Validate checks the config without touching files; errors name the field.
func (c Config) Validate() error { return c.validate(false) }

func (c Config) validate(customSampler bool) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	if len(c.Datasets) == 0 {
		return bad("datasets: want at least one dataset")
	}
	names := map[string]int{}
	weighted := 0
	for i, d := range c.Datasets {
		if d.Name == "" {
			return bad("datasets[%d].name: empty", i)
		}
		if j, dup := names[d.Name]; dup {
			return bad("datasets[%d].name %q: also datasets[%d]'s", i, d.Name, j)
		}
		names[d.Name] = i
		if d.Path == "" {
			return bad("datasets[%d].path: empty", i)
		}
		switch d.Format {
		case "", FormatArrow, FormatParquet, FormatJSONL:
		default:
			return bad("datasets[%d].format %q: want arrow, parquet, jsonl or empty (by extension)", i, d.Format)
		}
		if d.Weight < 0 || math.IsNaN(d.Weight) || math.IsInf(d.Weight, 0) {
			return bad("datasets[%d].weight %v: want a finite number ≥ 0", i, d.Weight)
		}
		if d.Weight > 0 {
			weighted++
		}
	}
	if c.VocabSize < 0 {
		return bad("vocab_size %d: want ≥ 0 (0 = not checked)", c.VocabSize)
	}
	if c.MaxLen < 0 {
		return bad("max_len %d: want ≥ 0 (0 = no limit)", c.MaxLen)
	}
	s := c.Sampler
	if s.Epochs < 0 {
		return bad("sampler.epochs %d: want ≥ 0 (0 = endless)", s.Epochs)
	}
	if s.BlockRows < 0 {
		return bad("sampler.block_rows %d: want ≥ 0 (0 = %d)", s.BlockRows, DefaultBlockRows)
	}
	if s.Window < 0 {
		return bad("sampler.window %d: want ≥ 0 (0 = %d)", s.Window, DefaultWindowBlocks)
	}
	if customSampler {
		return nil
	}
	switch s.Kind {
	case "sequential", "shuffle", "block_shuffle":
		if weighted > 0 {
			return bad("datasets[].weight: only the mixture sampler uses weights (sampler.kind is %q)", s.Kind)
		}
		if s.Replacement {
			return bad("sampler.replacement: only the mixture sampler draws with replacement")
		}
	case "mixture":
		if weighted != 0 && weighted != len(c.Datasets) {
			return bad("datasets[].weight: %d of %d datasets have a weight: set every weight or none", weighted, len(c.Datasets))
		}
		if weighted == 0 && !(s.Temperature > 0) {
			return bad("sampler.temperature %v: want > 0 (weights ∝ size^(1/T) when no weight is set)", s.Temperature)
		}
	default:
		return bad("sampler.kind %q: want sequential, shuffle, block_shuffle or mixture", s.Kind)
	}
	return nil
}
