package wiring

import (
	"path/filepath"
	"testing"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/model"
)

func TestSFTMapsTheRunConfig(t *testing.T) {
	c := config.Default()
	c.Run.Seed, c.Run.DataDir = 9, "/tmp/d"
	c.SFT.Data.Datasets = []config.SFTDataset{{Name: "a", Path: "/x", Weight: 2}}
	c.SFT.Pack.MicrobatchTokens, c.Trainer.DPSize = 512, 4
	c.SFT.LearningRate, c.SFT.LossReduction = 1e-4, config.LossSequenceMean
	c.Trainer.Backend, c.Trainer.Exec = config.BackendExec, []string{"py"}
	s := SFT(c)
	switch {
	case s.Data.Sampler.Seed != 9: // sampler seed 0 = run.seed
		t.Errorf("sampler seed %d", s.Data.Sampler.Seed)
	case s.Data.Datasets[0].Weight != 2 || s.Data.Datasets[0].Path != "/x":
		t.Errorf("datasets %+v", s.Data.Datasets)
	case s.Pack.Budget != 512 || s.Pack.DP != 4 || s.Pack.Strategy != "ffd":
		t.Errorf("pack %+v", s.Pack)
	case s.Trainer.LR != 1e-4 || s.Trainer.Reduction != model.SequenceMean || s.Trainer.Temperature != 1:
		t.Errorf("trainer %+v", s.Trainer)
	case s.OutputDir != filepath.Join("/tmp/d", "sft") || s.Seed != 9 || s.Backend != "exec" || s.Exec[0] != "py":
		t.Errorf("run %+v", s)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	c.SFT.Data.Sampler.Kind, c.SFT.Data.Sampler.BlockRows, c.SFT.Data.Sampler.Window = "block_shuffle", 1024, 3
	if got := SFT(c).Data.Sampler; got.Kind != "block_shuffle" || got.BlockRows != 1024 || got.Window != 3 {
		t.Errorf("block_shuffle sampler mapped to %+v", got)
	}
	c.SFT.Data.Sampler.Seed = 4
	if SFT(c).Data.Sampler.Seed != 4 {
		t.Error("an explicit sampler seed was replaced")
	}
}
