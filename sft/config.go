package sft

import (
	"errors"
	"fmt"
	"time"

	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/sft/data"
)

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("sft: invalid config")

// Backends.
const (
	// BackendBuiltin trains the built-in policy in this process.
	BackendBuiltin = "builtin"
	// BackendExec trains in a child process over the worker bridge.
	BackendExec = "exec"
)

// Config is one SFT run. wiring.SFT maps the run config's sft,
// trainer and run sections onto it.
type Config struct {
	// Data is the datasets and sampler.
	Data data.Config
	// Steps is the number of optimiser steps; 0 = until the stream ends.
	Steps int
	// TokensPerStep is the global batch: a step draws examples until their
	// tokens reach it (the last example may overshoot).
	TokensPerStep int
	// Pack is the microbatch token budget, the data-parallel size (the
	// number of bins is a multiple of it) and the strategy.
	Pack data.PackConfig
	// Trainer is the optimiser and the loss reduction (the RL-only
	// fields are not used: every step is cross-entropy).
	Trainer model.TrainerConfig
	// Model is the built-in policy's shape when starting fresh.
	Model model.Config
	// Seed seeds fresh weights (InitCheckpoint empty).
	Seed uint64
	// InitCheckpoint is the starting weights: a serving checkpoint
	// (config.json + model.safetensors) or a trainer checkpoint
	// (trainer.safetensors; its weights only). Empty = fresh from Seed.
	InitCheckpoint string
	// OutputDir holds the checkpoints (required).
	OutputDir string
	// CheckpointEvery writes a checkpoint every N steps; 0 = only the
	// last. The last step is always written.
	CheckpointEvery int
	// Resume continues from OutputDir's newest checkpoint (none there is
	// an error: nothing would be resumed).
	Resume bool
	// Backend is BackendBuiltin or BackendExec.
	Backend string
	// Exec is the child's argv and extra environment (BackendExec).
	Exec, ExecEnv []string
	// ExecStepTimeout and ExecRestarts bound a child step and its
	// restarts (bridge.Options).
	ExecStepTimeout time.Duration
	ExecRestarts    int
	// ExecRanks is trainer.exec_ranks: SFT trains with one child, so more
	// than 1 is refused rather than ignored.
	ExecRanks int
	// HFModel is a Hugging Face checkpoint directory (the config's model
	// section, docs/models.md) the exec child trains as model kind hf
	// instead of the built-in policy; InitCheckpoint and Model are then
	// not used. Each checkpoint's serving/ is a complete HF directory an
	// RL run starts from (trainer.init_checkpoint).
	HFModel string
}

// Validate names the first invalid field.
func (c Config) Validate() error {
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("%w: %s %s", ErrConfig, field, fmt.Sprintf(format, a...))
	}
	switch {
	case len(c.Data.Datasets) == 0:
		return bad("sft.data.datasets", "is empty: name at least one dataset (path)")
	case c.Steps < 0:
		return bad("sft.steps", "must be ≥ 0, got %d", c.Steps)
	case c.Steps == 0 && c.Data.Sampler.Epochs == 0:
		return bad("sft.steps", "is 0 (until the data ends) but sft.data.sampler.epochs is 0 (endless): set one of them")
	case c.TokensPerStep < 1:
		return bad("sft.tokens_per_step", "must be ≥ 1, got %d", c.TokensPerStep)
	case c.Pack.Budget < 1:
		return bad("sft.pack.microbatch_tokens", "must be ≥ 1, got %d", c.Pack.Budget)
	case c.Pack.DP < 1:
		return bad("trainer.dp_size", "must be ≥ 1, got %d", c.Pack.DP)
	case c.Pack.Strategy != "ffd" && c.Pack.Strategy != "balanced":
		return bad("sft.pack.strategy", "must be ffd or balanced, got %q", c.Pack.Strategy)
	case c.OutputDir == "":
		return bad("sft.output_dir", "is empty")
	case c.CheckpointEvery < 0:
		return bad("sft.checkpoint_every", "must be ≥ 0, got %d", c.CheckpointEvery)
	case c.Backend != BackendBuiltin && c.Backend != BackendExec:
		return bad("trainer.backend", "must be builtin or exec for sft, got %q", c.Backend)
	case c.Backend == BackendExec && (len(c.Exec) == 0 || c.Exec[0] == ""):
		return bad("trainer.exec", "is empty: the exec backend needs the trainer child's command")
	case c.Backend == BackendExec && c.ExecRanks > 1:
		return bad("trainer.exec_ranks", "is %d, but asyncrl sft trains with one trainer child; worker groups run in asyncrl run and asyncrl node: set it to 1", c.ExecRanks)
	case c.HFModel != "" && c.Backend != BackendExec:
		return bad("trainer.backend", "is %s, but a Hugging Face model is trained by the PyTorch worker: set trainer.backend: exec with trainer.exec: [/usr/bin/python3, -m, asyncrl_worker]", c.Backend)
	case c.HFModel != "" && c.InitCheckpoint != "":
		return bad("sft.init_checkpoint", "is for the built-in policy; a Hugging Face model starts from model.path")
	}
	if err := c.Trainer.Validate(); err != nil {
		return fmt.Errorf("%w: trainer: %w", ErrConfig, err)
	}
	if c.InitCheckpoint == "" {
		if err := c.Model.Validate(); err != nil {
			return fmt.Errorf("%w: model: %w", ErrConfig, err)
		}
	}
	return nil
}
