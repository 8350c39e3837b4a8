package agent

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/asyncrl/asyncrl/cluster/ckpt"
	"github.com/asyncrl/asyncrl/cluster/internal/retry"
	"github.com/asyncrl/asyncrl/cluster/ledger"
	"github.com/asyncrl/asyncrl/cluster/term"
	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/weights/store"
)

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
	if err := retry.Do(ctx, ckpt.RetryWithin, func() (err error) {
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
	load := st.Load // a built-in trainer's checkpoint, checked by model.LoadTrainer
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
func (c *termCkpt) afterStep(ctx context.Context, tr *model.Trainer, v int64) error {
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
var ckptSavedHook func(node string, version int64, tr *model.Trainer)
