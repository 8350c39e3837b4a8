package data

// This file is the API the SFT runner (package sft) codes to; see doc.go.

import "context"

// ExampleID names one row of one shard of one dataset; stable across runs.
type ExampleID struct{ Dataset, Shard, Row uint32 }

// Example is one training sequence.
type Example struct {
	ID       ExampleID
	Tokens   []int32
	LossMask []uint8 // len(Tokens); nil = train on every token after the first
}

// Stream yields examples in the order its sampler chose. Next returns io.EOF when a
// finite sampler (sequential/shuffled with epochs set) is exhausted. State is an opaque,
// versioned blob; Restore(State()) on a freshly opened Stream over the same datasets
// makes it yield exactly the examples the original would have yielded next.
type Stream interface {
	Next(ctx context.Context) (Example, error)
	State() ([]byte, error)
	Restore(state []byte) error
	Close() error
}

// Config is YAML (unknown keys are errors) and lives under `sft.data` in the run config.
type Config struct {
	Datasets  []DatasetConfig `yaml:"datasets"`
	Sampler   SamplerConfig   `yaml:"sampler"`
	VocabSize int             `yaml:"vocab_size"` // 0 = not checked
	MaxLen    int             `yaml:"max_len"`    // examples longer are truncated (0 = no limit)
	// IndexDir caches shard indexes; "" = next to each shard (or the user
	// cache dir where that folder is read-only).
	IndexDir string `yaml:"index_dir"`
}

// DatasetConfig names one dataset: one file, a directory of shards, or a glob.
type DatasetConfig struct {
	Name   string  `yaml:"name"`
	Path   string  `yaml:"path"`   // a file, a directory of shards, or a glob
	Format string  `yaml:"format"` // arrow | parquet | jsonl | "" (by extension)
	Weight float64 `yaml:"weight"` // mixture weight (mixture sampler)
}

// SamplerConfig chooses the order examples are drawn in.
type SamplerConfig struct {
	Kind        string  `yaml:"kind"` // sequential | shuffle | block_shuffle | mixture
	Seed        uint64  `yaml:"seed"`
	Epochs      int     `yaml:"epochs"`      // 0 = endless
	Replacement bool    `yaml:"replacement"` // mixture
	Temperature float64 `yaml:"temperature"` // mixture: weights ∝ size^(1/T) when weights unset
	// BlockRows: block_shuffle cuts the rows into blocks of this many
	// consecutive rows (0 = 8192).
	BlockRows int `yaml:"block_rows"`
	// Window: block_shuffle draws from this many blocks at a time, in a
	// permutation of their rows, before moving on (0 = 8).
	Window int `yaml:"window"`
}

// Bin is one packed sequence: examples laid end to end, at most Budget
// tokens, with attention segments so no example sees another.
type Bin struct {
	Tokens    []int32
	LossMask  []uint8
	Segments  []int32 // per token: index of its example in IDs; -1 = padding
	Positions []int32 // per token: position within its example
	IDs       []ExampleID
}

// PackConfig: Budget tokens per bin, the bin count a multiple of DP,
// Strategy ffd (first-fit decreasing) or balanced.
type PackConfig struct {
	Budget, DP int
	Strategy   string /* ffd | balanced */
}
