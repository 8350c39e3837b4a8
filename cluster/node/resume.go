package node

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"

	"github.com/asyncrl/asyncrl/actors/publisher"
	"github.com/asyncrl/asyncrl/actors/trainer"
	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/weights/safetensors"
)

// loadTrainerWithConfig restores the trainer checkpoint in dir
// (model.LoadTrainer) under this run's trainer config: the master
// weights, Adam moments, optimiser step and RNG state come from the
// checkpoint; every hyperparameter (and Workers, sized for this node's
// CPUs) from tcfg. policy has no setter for a restored trainer's config,
// so the checkpoint's trainer_config metadata is replaced in a temporary
// copy, and the result is checked. dir itself is left as it is.
func loadTrainerWithConfig(dir string, tcfg model.TrainerConfig) (*model.Trainer, error) {
	f, err := safetensors.Open(filepath.Join(dir, model.TrainerFileName))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", model.ErrCheckpoint, err)
	}
	defer f.Close()
	var ts []safetensors.Tensor
	for _, name := range f.Names() {
		data, info, err := f.ReadTensor(name)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", model.ErrCheckpoint, err)
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
	if err := safetensors.WriteFile(filepath.Join(tmp, model.TrainerFileName), ts, md); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	cfgJS, err := os.ReadFile(filepath.Join(dir, model.ConfigFileName))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", model.ErrCheckpoint, err)
	}
	if err := os.WriteFile(filepath.Join(tmp, model.ConfigFileName), cfgJS, 0o644); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	tr, err := model.LoadTrainer(tmp)
	if err != nil {
		return nil, err
	}
	if got := tr.Config(); got != tcfg {
		return nil, fmt.Errorf("%w: restored trainer config %+v, want this run's %+v (has the checkpoint format changed?)", model.ErrCheckpoint, got, tcfg)
	}
	return tr, nil
}

// afterStepPublisher runs Options.AfterStep once each version is
// published. It runs in the trainer actor's goroutine, between the publish
// and the step's record, so tr holds exactly version v (this run's local
// version). Its error is a trainer.AfterPublishError (the version is
// published; its checkpoint is not), retried as a failed publish under
// publisher.attempts.
type afterStepPublisher struct {
	publisher.Publisher
	tr    *model.Trainer
	after func(ctx context.Context, tr *model.Trainer, version int64) error
}

// Publish implements publisher.Publisher.
func (p afterStepPublisher) Publish(ctx context.Context, w publisher.Weights, v int64) error {
	if err := p.Publisher.Publish(ctx, w, v); err != nil {
		return err
	}
	if err := p.after(ctx, p.tr, v); err != nil {
		return &trainer.AfterPublishError{Version: v, What: "checkpoint", Err: fmt.Errorf("node: after version %d: %w", v, err)}
	}
	return nil
}
