package node

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"

	"github.com/asyncrl/asyncrl/actors/publisher"
	"github.com/asyncrl/asyncrl/cluster/ckpt"
	"github.com/asyncrl/asyncrl/cluster/ledger"
	"github.com/asyncrl/asyncrl/cluster/term"
	"github.com/asyncrl/asyncrl/policy"
	"github.com/asyncrl/asyncrl/weights/safetensors"
	"github.com/asyncrl/asyncrl/weights/store"
)

// loadTrainerWithConfig restores the trainer checkpoint in dir
// (policy.LoadTrainer) under this run's trainer config: the master
// weights, Adam moments, optimiser step and RNG state come from the
// checkpoint; every hyperparameter (and Workers, sized for this node's
// CPUs) from tcfg. policy has no setter for a restored trainer's config,
// so the checkpoint's trainer_config metadata is replaced in a temporary
// copy, and the result is checked. dir itself is left as it is.
func loadTrainerWithConfig(dir string, tcfg policy.TrainerConfig) (*policy.Trainer, error) {
	f, err := safetensors.Open(filepath.Join(dir, policy.TrainerFileName))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", policy.ErrCheckpoint, err)
	}
	defer f.Close()
	var ts []safetensors.Tensor
	for _, name := range f.Names() {
		data, info, err := f.ReadTensor(name)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", policy.ErrCheckpoint, err)
		}
		ts = append(ts, safetensors.Tensor{Name: name, DType: info.DType, Shape: info.Shape, Data: data})
	}
	js, err := json.Marshal(tcfg)
	if err != nil {
		return nil, err
	}
	md := maps.Clone(f.Metadata)
	if md == nil {
		md = map[string]string{}
	}
	md["trainer_config"] = string(js)
	tmp, err := os.MkdirTemp("", "asyncrl-resume-*")
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := safetensors.WriteFile(filepath.Join(tmp, policy.TrainerFileName), ts, md); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	cfgJS, err := os.ReadFile(filepath.Join(dir, policy.ConfigFileName))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", policy.ErrCheckpoint, err)
	}
	if err := os.WriteFile(filepath.Join(tmp, policy.ConfigFileName), cfgJS, 0o644); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	tr, err := policy.LoadTrainer(tmp)
	if err != nil {
		return nil, err
	}
	if got := tr.Config(); got != tcfg {
		return nil, fmt.Errorf("%w: restored trainer config %+v, want this run's %+v (has the checkpoint format changed?)", policy.ErrCheckpoint, got, tcfg)
	}
	return tr, nil
}

// afterStepPublisher runs Options.AfterStep once each version is
// published. It runs in the trainer actor's goroutine, between the publish
// and the step's record, so tr holds exactly version v (this run's local
// version); an error fails the step.
type afterStepPublisher struct {
	publisher.Publisher
	tr    *policy.Trainer
	after func(ctx context.Context, tr *policy.Trainer, version int64) error
}

// Publish implements publisher.Publisher.
func (p afterStepPublisher) Publish(ctx context.Context, w publisher.Weights, v int64) error {
	if err := p.Publisher.Publish(ctx, w, v); err != nil {
		return err
	}
	if err := p.after(ctx, p.tr, v); err != nil {
		return fmt.Errorf("node: after version %d: %w", v, err)
	}
	return nil
}

// termCkpt is one trainer term's checkpointing: the restore at its start
// and an upload after every step (AfterStep), reported to the term's core
// (CheckpointSaved) so the step's durable progress records its location.
// What may be pruned, and when, is the core's decision (term.Prune).
type termCkpt struct {
	store *ckpt.Store
	node  string
	base  int64 // the global version of this term's version 0
	token uint64
	// report hands the core its inputs (the term's inbox; AfterStep runs
	// in the trainer's goroutine).
	report func(term.Input)
}

// startTermCkpt opens the run's checkpoint bucket for the term that
// claimed progress p with token. When p records a checkpoint it is
// downloaded into resumeDir and verified; its global version must be
// p.Version. Progress past version 0 without a checkpoint is refused: the
// term would silently restart the policy from the seed's weights.
func startTermCkpt(ctx context.Context, a *Agent, p ledger.Progress, token uint64, resumeDir string, exec bool, report func(term.Input)) (*termCkpt, bool, error) {
	var (
		raw  store.Store
		root string
	)
	// The bucket's stream may be electing a leader (a node died).
	if err := retry(ctx, ckpt.RetryWithin, func() (err error) {
		raw, root, err = ckpt.OpenNATS(ctx, a.bus.Conn(), a.cfg.Run.Run.ID, a.cfg.Replicas, a.cfg.InMemoryBus)
		return err
	}); err != nil {
		return nil, false, fmt.Errorf("node: checkpoints: %w", err)
	}
	st, err := ckpt.New(raw, root, ckpt.Options{Scratch: filepath.Dir(resumeDir),
		BeforeCommit: func(v int64) { a.hold(HoldCheckpointWrite, v) }})
	if err != nil {
		return nil, false, err
	}
	c := &termCkpt{store: st, node: a.cfg.Name, base: p.Version, token: token, report: report}
	if p.Checkpoint == "" {
		if p.Version > 0 {
			return nil, false, fmt.Errorf("%w: the durable progress (step %d version %d) records no checkpoint; refusing to restart the policy from the seed's weights",
				ckpt.ErrCheckpoint, p.Step, p.Version)
		}
		return c, false, nil
	}
	load := st.Load // a built-in trainer's checkpoint, checked by policy.LoadTrainer
	if exec {
		load = st.LoadDir // the trainer child's state: the child checks it on Init
	}
	v, err := load(ctx, p.Checkpoint, resumeDir)
	if err != nil {
		return nil, false, err
	}
	if v != p.Version {
		return nil, false, fmt.Errorf("%w: %s is version %d but the durable progress is at version %d", ckpt.ErrCheckpoint, p.Checkpoint, v, p.Version)
	}
	return c, true, nil
}

// afterStep is Options.AfterStep: upload local version v as global
// version base+v, and tell the core where it lies.
func (c *termCkpt) afterStep(ctx context.Context, tr *policy.Trainer, v int64) error {
	loc, err := c.store.Save(ctx, tr, c.base+v, c.token)
	if err != nil {
		return err
	}
	c.report(term.CheckpointSaved{Token: c.token, Version: v, Location: loc})
	if h := ckptSavedHook; h != nil {
		h(c.node, c.base+v, tr)
	}
	return nil
}

// afterExecStep is Options.AfterExecStep: upload the trainer child's
// state of local version v (state, its directory) as global version
// base+v, and tell the core where it lies.
func (c *termCkpt) afterExecStep(ctx context.Context, state string, v int64) error {
	if state == "" {
		return fmt.Errorf("%w: the trainer child reported no state for version %d", ckpt.ErrCheckpoint, v)
	}
	loc, err := c.store.SaveDir(ctx, state, c.base+v, c.token)
	if err != nil {
		return err
	}
	c.report(term.CheckpointSaved{Token: c.token, Version: v, Location: loc})
	return nil
}

// ckptSavedHook, set by tests before any agent starts, sees every trainer
// a term checkpointed: the node, the global version, the trainer (which
// holds exactly that version during the call).
var ckptSavedHook func(node string, version int64, tr *policy.Trainer)
