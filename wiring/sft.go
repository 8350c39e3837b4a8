package wiring

import (
	"path/filepath"

	"github.com/asyncrl/asyncrl/config"
	pmodel "github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/sft"
	"github.com/asyncrl/asyncrl/sft/data"
)

// SFTData maps sft.data onto the data path's config (a sampler seed of 0
// is run.seed).
func SFTData(c config.Config) data.Config {
	d := c.SFT.Data
	out := data.DefaultConfig()
	out.Datasets = make([]data.DatasetConfig, len(d.Datasets))
	for i, ds := range d.Datasets {
		out.Datasets[i] = data.DatasetConfig{Name: ds.Name, Path: ds.Path, Format: ds.Format, Weight: ds.Weight}
	}
	seed := d.Sampler.Seed
	if seed == 0 {
		seed = c.Run.Seed
	}
	out.Sampler = data.SamplerConfig{Kind: string(d.Sampler.Kind), Seed: uint64(seed), Epochs: d.Sampler.Epochs,
		Replacement: d.Sampler.Replacement, Temperature: d.Sampler.Temperature,
		BlockRows: d.Sampler.BlockRows, Window: d.Sampler.Window}
	out.VocabSize, out.MaxLen, out.IndexDir = d.VocabSize, d.MaxLen, d.IndexDir
	return out
}

// SFT maps the run config onto an SFT run: the sft section, the trainer
// backend and its exec settings, trainer.dp_size as the packing's DP size,
// and run.seed for fresh weights and the trainer's RNG. The trainer's
// RL-only settings are PolicyTrainer's defaults: every SFT step is
// cross-entropy.
func SFT(c config.Config) sft.Config {
	s := c.SFT
	t := PolicyTrainer(c)
	t.LR, t.WeightDecay, t.MaxGradNorm, t.WarmupSteps = s.LearningRate, s.WeightDecay, s.GradClip, s.WarmupSteps
	t.Reduction = string(s.LossReduction)
	t.Temperature = 1
	out := s.OutputDir
	if out == "" {
		out = filepath.Join(c.Run.DataDir, "sft")
	}
	return sft.Config{
		Data: SFTData(c), Steps: s.Steps, TokensPerStep: s.TokensPerStep,
		Pack:    data.PackConfig{Budget: s.Pack.MicrobatchTokens, DP: c.Trainer.DPSize, Strategy: string(s.Pack.Strategy)},
		Trainer: t, Model: pmodel.DefaultConfig(), Seed: uint64(c.Run.Seed),
		InitCheckpoint: s.InitCheckpoint, OutputDir: out, CheckpointEvery: s.CheckpointEvery, Resume: s.Resume,
		Backend: string(c.Trainer.Backend), Exec: c.Trainer.Exec, ExecEnv: c.Trainer.ExecEnv,
		ExecStepTimeout: c.Trainer.ExecStepTimeout, ExecRestarts: c.Trainer.ExecRestarts, ExecRanks: c.Trainer.ExecRanks,
	}
}
