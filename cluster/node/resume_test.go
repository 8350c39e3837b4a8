package node

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/model/trainertest"
)

// A trainer checkpoint restored under another run config keeps its state
// bit-identical (master weights, Adam moments, step, RNG) and takes only
// the run's hyperparameters. (cluster/ckpt tests the store round trip.)
func TestLoadTrainerWithConfigKeepsStateTakesRunConfig(t *testing.T) {
	tr := trainertest.Trained(t, 3)
	dir := t.TempDir()
	if err := tr.SaveTrainer(dir); err != nil {
		t.Fatal(err)
	}
	got, err := model.LoadTrainer(dir)
	if err != nil {
		t.Fatal(err)
	}
	wantT, wantMD := trainertest.State(t, tr)
	// The run's config replaces the checkpoint's hyperparameters; the
	// state stays bit-identical.
	rc := model.DefaultTrainerConfig()
	rc.LR, rc.Workers = 1e-4, 3
	withCfg, err := loadTrainerWithConfig(dir, rc)
	if err != nil {
		t.Fatal(err)
	}
	if withCfg.Config() != rc {
		t.Fatalf("config %+v, want the run's %+v", withCfg.Config(), rc)
	}
	if gT, gMD := trainertest.State(t, withCfg); !trainertest.Same(gT, wantT) || !maps.Equal(gMD, wantMD) {
		t.Fatal("state changed when applying the run's config")
	}
	// Both copies take the same next step; only the LR differs, so the
	// weights must differ after it (the config really applies).
	b := model.Batch{Sequences: []model.Sequence{
		{Tokens: []int32{1, 40, 41}, LossMask: []uint8{0, 1, 1}, RolloutLogprobs: []float32{0, -4, -4}, Advantage: 1},
		{Tokens: []int32{1, 60, 61}, LossMask: []uint8{0, 1, 1}, RolloutLogprobs: []float32{0, -4, -4}, Advantage: -1},
	}}
	if _, err := got.Step(b); err != nil {
		t.Fatal(err)
	}
	if _, err := withCfg.Step(b); err != nil {
		t.Fatal(err)
	}
	if trainertest.Same(trainertest.ServingBytes(t, got.ServingCopy()), trainertest.ServingBytes(t, withCfg.ServingCopy())) {
		t.Fatal("a 30x smaller learning rate changed nothing")
	}
	if _, err := loadTrainerWithConfig(dir, model.TrainerConfig{}); err == nil {
		t.Fatal("an invalid run config was accepted")
	}
}

// A Node started from a trainer checkpoint serves its weights as version
// 0 in both publisher modes: on step 1 (tokens of version 0 only) the
// train–inference mismatch is BF16 rounding, which it could not be if the
// engines served the seed's weights (another seed here). AfterStep sees
// local versions 1, 2 on a trainer whose own step count goes on from the
// checkpoint's, and an AfterStep error fails the step.
func TestNodeStartsFromTrainerCheckpoint(t *testing.T) {
	ck := t.TempDir()
	if err := trainertest.Trained(t, 3).SaveTrainer(ck); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []config.PublishMode{config.PublishDelta, config.PublishFull} {
		t.Run(string(mode), func(t *testing.T) {
			cfg := smallConfig(t, 2)
			cfg.Publisher.Mode = mode
			var mu sync.Mutex
			var got [][2]int64 // (version, trainer's own version)
			_, s := runNodeWith(t, cfg, Options{InMemoryBus: true, TrainerCheckpoint: ck,
				AfterStep: func(_ context.Context, tr *model.Trainer, v int64) error {
					mu.Lock()
					defer mu.Unlock()
					got = append(got, [2]int64{v, tr.Version()})
					return nil
				}}, nil)
			if len(s.PerStep) != 2 || s.PerStep[0].Version != 1 || s.PerStep[1].Version != 2 {
				t.Fatalf("steps %+v", s.PerStep)
			}
			t.Logf("step 1 mismatch %.2g", s.PerStep[0].Mismatch)
			if m := s.PerStep[0].Mismatch; !(m < 0.01) {
				t.Fatalf("step 1 mismatch %v: the engines' version 0 is not the restored trainer's weights", m)
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(got, [][2]int64{{1, 4}, {2, 5}}) {
				t.Fatalf("AfterStep saw (version, trainer version) %v, want [[1 4] [2 5]]", got)
			}
		})
	}
	t.Run("after step error", func(t *testing.T) {
		boom := errors.New("checkpoint store down")
		n, err := New(smallConfig(t, 3), Options{InMemoryBus: true, TrainerCheckpoint: ck,
			AfterStep: func(context.Context, *model.Trainer, int64) error { return boom }})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := n.Start(ctx); err != nil {
			t.Fatal(err)
		}
		_, err = n.Wait(ctx)
		n.Stop()
		if !errors.Is(err, boom) || len(n.steps()) != 0 {
			t.Fatalf("wait: %v with %d steps recorded; want the AfterStep error and no step", err, len(n.steps()))
		}
	})
}
