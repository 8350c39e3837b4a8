package config

import (
	"fmt"
	"math"
)

// SFTConfig configures supervised fine-tuning (`asyncrl sft`, docs/sft.md):
// the data, the step size in tokens, packing, the optimiser, checkpoints.
// The trainer backend is trainer.backend (builtin or exec) with its exec
// settings, and the seed run.seed, as for RL.
type SFTConfig struct {
	// Data is the datasets and the sampler (package sft/data; mapped by
	// wiring.SFTData).
	Data SFTDataConfig `yaml:"data" doc:"datasets and sampler (package sft/data)"`
	// Steps is the number of optimiser steps; 0 = until a finite sampler
	// runs out (sampler.epochs set). --steps overrides it.
	Steps int `yaml:"steps" doc:"optimiser steps; 0 = until a finite sampler (sampler.epochs > 0) runs out"`
	// TokensPerStep is the global batch: a step draws examples until their
	// tokens reach it (the last example may overshoot).
	TokensPerStep int `yaml:"tokens_per_step" doc:"global batch size in tokens: each step draws examples until their tokens reach this"`
	// Pack is how a step's examples become microbatches.
	Pack SFTPackConfig `yaml:"pack" doc:"packing of a step's examples into microbatches"`
	// LearningRate is AdamW's step size.
	LearningRate float64 `yaml:"learning_rate" doc:"AdamW learning rate"`
	// WarmupSteps ramps the learning rate linearly over the first steps
	// (step k uses learning_rate·k/warmup_steps until k reaches it).
	WarmupSteps int `yaml:"warmup_steps" doc:"linear learning-rate warm-up: step k uses learning_rate*k/warmup_steps until k = warmup_steps; 0 = none"`
	// WeightDecay is AdamW's decoupled weight decay (0 = off).
	WeightDecay float64 `yaml:"weight_decay" doc:"AdamW decoupled weight decay; 0 = off"`
	// GradClip is the global gradient-norm clip (0 = off).
	GradClip float64 `yaml:"grad_clip" doc:"global gradient-norm clip; 0 = off"`
	// LossReduction reduces the token NLLs (token_mean: the mean over the
	// step's trained tokens).
	LossReduction LossReduction `yaml:"loss_reduction" doc:"how token NLLs become the step's loss (SkyRL loss_reduction; token_mean = mean NLL per trained token)"`
	// InitCheckpoint is the starting weights: a serving checkpoint
	// (config.json + model.safetensors) or a trainer checkpoint
	// (trainer.safetensors, optimiser moments ignored); empty = a fresh
	// built-in policy from run.seed.
	InitCheckpoint string `yaml:"init_checkpoint" doc:"starting weights: a serving or trainer checkpoint dir of the built-in policy; empty = fresh weights from run.seed"`
	// OutputDir holds the run's checkpoints (step-NNNNNNNN/ and latest).
	OutputDir string `yaml:"output_dir" doc:"checkpoint directory (step-NNNNNNNN/, latest); empty = <run.data_dir>/sft"`
	// CheckpointEvery writes a checkpoint every N steps (the last step is
	// always written).
	CheckpointEvery int `yaml:"checkpoint_every" doc:"write a checkpoint every N steps (0 = only at the end); the last step is always written"`
	// Resume continues from the newest checkpoint in output_dir (weights,
	// optimiser, step and the sampler's position).
	Resume bool `yaml:"resume" doc:"continue from the newest checkpoint in output_dir: weights, optimiser, step and the sampler's position"`
}

// SFTDataConfig mirrors sft/data.Config (docs/sft.md, "Data").
type SFTDataConfig struct {
	// Datasets are the datasets to draw from.
	Datasets []SFTDataset `yaml:"datasets" doc:"datasets: a list of {name, path, format, weight}"`
	// Sampler chooses the order.
	Sampler SFTSampler `yaml:"sampler" doc:"the order examples are drawn in"`
	// VocabSize checks token ids (0 = the model's vocabulary).
	VocabSize int `yaml:"vocab_size" doc:"token ids must be below this; 0 = the model's vocab_size"`
	// MaxLen truncates longer examples (0 = the model's max_seq_len).
	MaxLen int `yaml:"max_len" doc:"longer examples are truncated; 0 = the model's max_seq_len"`
	// IndexDir caches the shards' indexes (built once per shard).
	IndexDir string `yaml:"index_dir" doc:"where shard indexes are cached; empty = next to each shard (or the user cache dir where that is read-only)"`
}

// SFTDataset is one dataset: one file, a directory of shards, or a glob.
type SFTDataset struct {
	Name   string  `yaml:"name" doc:"dataset name (reports, example ids)"`
	Path   string  `yaml:"path" doc:"a file, a directory of shards, or a glob"`
	Format string  `yaml:"format" doc:"arrow, parquet, jsonl, or empty (by file extension)"`
	Weight float64 `yaml:"weight" doc:"mixture weight (sampler kind mixture); 0 = from the sizes and sampler.temperature"`
}

// SFTSampler chooses the order examples are drawn in.
type SFTSampler struct {
	Kind        SFTSamplerKind `yaml:"kind" doc:"sequential, shuffle (seeded, epoch-aware), block_shuffle (shuffle within windows of row blocks: fast on large Arrow data, docs/sft.md) or mixture (weighted over datasets)"`
	Seed        int64          `yaml:"seed" doc:"sampler seed; 0 = run.seed"`
	Epochs      int            `yaml:"epochs" doc:"passes over the data; 0 = endless"`
	Replacement bool           `yaml:"replacement" doc:"mixture: draw with replacement"`
	Temperature float64        `yaml:"temperature" doc:"mixture without weights: weights ∝ size^(1/temperature)"`
	BlockRows   int            `yaml:"block_rows" doc:"block_shuffle: rows per block (consecutive rows of the files); 0 = 8192"`
	Window      int            `yaml:"window" doc:"block_shuffle: blocks drawn from at a time, in a permutation of their rows; 0 = 8"`
}

// SFTSamplerKind is the sampler.
type SFTSamplerKind string

// Values lists the samplers.
func (SFTSamplerKind) Values() []string {
	return []string{"sequential", "shuffle", "block_shuffle", "mixture"}
}

// SFTPackConfig is packing: examples into microbatches of at most
// MicrobatchTokens tokens, a multiple of trainer.dp_size of them.
type SFTPackConfig struct {
	MicrobatchTokens int             `yaml:"microbatch_tokens" doc:"token budget of one microbatch (one packed bin); ≥ the longest example"`
	Strategy         SFTPackStrategy `yaml:"strategy" doc:"ffd (first-fit decreasing) or balanced"`
}

// SFTPackStrategy is the packing algorithm.
type SFTPackStrategy string

// Values lists the packing strategies.
func (SFTPackStrategy) Values() []string { return []string{"ffd", "balanced"} }

// DefaultSFT trains the built-in policy on 4096-token steps packed into
// 1024-token microbatches (the built-in model's max_seq_len is 256, so a
// bin holds at least four examples), with the RL trainer's learning rate
// and a checkpoint every 50 steps.
func DefaultSFT() SFTConfig {
	return SFTConfig{
		Data: SFTDataConfig{
			Datasets: []SFTDataset{},
			Sampler:  SFTSampler{Kind: "shuffle", Temperature: 1, BlockRows: 8192, Window: 8},
		},
		Steps:           100,
		TokensPerStep:   4096,
		Pack:            SFTPackConfig{MicrobatchTokens: 1024, Strategy: "ffd"},
		LearningRate:    3e-3,
		WeightDecay:     0,
		GradClip:        1,
		LossReduction:   LossTokenMean,
		CheckpointEvery: 50,
	}
}

// Validate checks the sft section without touching files (the datasets
// are opened, and checked, by `asyncrl sft`).
func (c SFTConfig) Validate() error {
	v := checker{section: "sft"}
	v.checkEnums(c)
	v.atLeast("steps", int64(c.Steps), 0)
	v.atLeast("tokens_per_step", int64(c.TokensPerStep), 1)
	v.positiveFloat("learning_rate", c.LearningRate)
	v.atLeast("warmup_steps", int64(c.WarmupSteps), 0)
	v.nonNegativeFloat("weight_decay", c.WeightDecay)
	v.nonNegativeFloat("grad_clip", c.GradClip)
	v.atLeast("checkpoint_every", int64(c.CheckpointEvery), 0)
	p := checker{section: "sft.pack"}
	p.checkEnums(c.Pack)
	p.atLeast("microbatch_tokens", int64(c.Pack.MicrobatchTokens), 1)
	d := checker{section: "sft.data"}
	d.atLeast("vocab_size", int64(c.Data.VocabSize), 0)
	d.atLeast("max_len", int64(c.Data.MaxLen), 0)
	names := map[string]int{}
	for i, ds := range c.Data.Datasets {
		f := fmt.Sprintf("datasets[%d]", i)
		d.notEmpty(f+".path", ds.Path)
		if ds.Name != "" {
			if j, dup := names[ds.Name]; dup {
				d.fail(f+".name", "%q is also datasets[%d]'s name", ds.Name, j)
			}
			names[ds.Name] = i
		}
		switch ds.Format {
		case "", "arrow", "parquet", "jsonl":
		default:
			d.fail(f+".format", "%q is not one of arrow, parquet, jsonl (or empty: by extension)", ds.Format)
		}
		if !(ds.Weight >= 0) || math.IsInf(ds.Weight, 0) {
			d.fail(f+".weight", "must be ≥ 0 and finite, got %g", ds.Weight)
		}
	}
	s := checker{section: "sft.data.sampler"}
	s.checkEnums(c.Data.Sampler)
	s.atLeast("epochs", int64(c.Data.Sampler.Epochs), 0)
	s.atLeast("seed", c.Data.Sampler.Seed, 0)
	s.positiveFloat("temperature", c.Data.Sampler.Temperature)
	s.atLeast("block_rows", int64(c.Data.Sampler.BlockRows), 0)
	s.atLeast("window", int64(c.Data.Sampler.Window), 0)
	var errs []*Error
	for _, ch := range []checker{v, p, d, s} {
		errs = append(errs, ch.errs...)
	}
	return joinErrors(errs)
}
