package trainer

import (
	"context"

	"github.com/asyncrl/asyncrl/actors/publisher"
	"github.com/asyncrl/asyncrl/model"
)

// Stepper takes the trainer actor's optimiser steps: the built-in trainer
// in process (Start), or a child process over the worker bridge
// (NewExec, StartStepper).
type Stepper interface {
	// Version is the number of steps taken (model.Trainer.Version).
	Version() int64
	// Step takes ONE optimiser step on p, following its microbatch plan,
	// and returns its stats and the new version's serving weights (BF16
	// values, what the engines load). On error no step was taken.
	Step(ctx context.Context, p Prepared) (model.StepStats, publisher.Weights, error)
}

// builtinStepper is the built-in trainer: Train, then its serving copy.
type builtinStepper struct{ tr *model.Trainer }

var _ Stepper = builtinStepper{}

func (b builtinStepper) Version() int64 { return b.tr.Version() }

func (b builtinStepper) Step(_ context.Context, p Prepared) (model.StepStats, publisher.Weights, error) {
	st, err := Train(b.tr, p)
	if err != nil {
		return st, publisher.Weights{}, err
	}
	return st, publisher.InMemory(b.tr.ServingCopy()), nil
}
