package model

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/asyncrl/asyncrl/model/sampler"
)

func TestServingRoundTripIsBF16(t *testing.T) {
	m, _ := New(DefaultConfig(), 4)
	for _, shard := range []int64{0, 40_000} {
		dir := t.TempDir()
		if err := m.SaveServingSharded(dir, shard, map[string]string{"version": "3"}); err != nil {
			t.Fatal(err)
		}
		got, err := LoadServing(dir)
		if err != nil {
			t.Fatal(err)
		}
		want := m.Clone()
		want.RoundBF16()
		if !slices.Equal(got.params, want.params) {
			t.Fatalf("shard %d: loaded weights are not the BF16-rounded master weights", shard)
		}
		if slices.Equal(got.params, m.params) {
			t.Fatal("BF16 load equals FP32 weights: nothing was rounded")
		}
		if got.Config() != m.Config() {
			t.Fatalf("config %+v", got.Config())
		}
		_, err = os.Stat(filepath.Join(dir, "model.safetensors.index.json"))
		if (shard > 0) != (err == nil) {
			t.Fatalf("shard %d: index present = %v", shard, err == nil)
		}
	}
}

func TestLoadServingErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadServing(dir); !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("empty dir: %v", err)
	}
	m, _ := New(DefaultConfig(), 4)
	if err := m.SaveServing(dir); err != nil {
		t.Fatal(err)
	}
	// A config that disagrees with the tensors is caught.
	cfg := DefaultConfig()
	cfg.Hidden = 64
	if err := writeConfig(dir, cfg, "bfloat16"); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadServing(dir); !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("shape mismatch: %v", err)
	}
}

// TestTrainerResumeBitIdentical: save → load → continue equals
// uninterrupted training, bit for bit.
func TestTrainerResumeBitIdentical(t *testing.T) {
	base, _ := New(DefaultConfig(), 8)
	rng := rand.New(rand.NewPCG(8, 8))
	var batches []Batch
	for range 6 {
		batches = append(batches, Batch{Sequences: rollout(t, base, 6, 5, rng, sampler.DefaultParams())})
	}
	cfg := DefaultTrainerConfig()
	cfg.Workers, cfg.WeightDecay, cfg.Seed = 2, 0.01, 99
	straight, _ := NewTrainer(base.Clone(), cfg)
	for _, b := range batches {
		if _, err := straight.Step(b); err != nil {
			t.Fatal(err)
		}
	}
	first, _ := NewTrainer(base.Clone(), cfg)
	for _, b := range batches[:3] {
		first.Step(b)
	}
	first.rng.Uint64() // advance the RNG so its state is non-trivial
	wantRNG := first.rng.Uint64()
	dir := t.TempDir()
	if err := first.SaveTrainer(dir); err != nil {
		t.Fatal(err)
	}
	resumed, err := LoadTrainer(dir)
	if err != nil {
		t.Fatal(err)
	}
	if resumed.Version() != 3 || resumed.Config() != cfg {
		t.Fatalf("resumed version %d config %+v", resumed.Version(), resumed.Config())
	}
	if got := resumed.rng.Uint64(); got != first.rng.Uint64() {
		t.Fatalf("RNG state not restored: %d (saved after %d)", got, wantRNG)
	}
	for _, b := range batches[3:] {
		if _, err := resumed.Step(b); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(resumed.model.params, straight.model.params) ||
		!slices.Equal(resumed.m, straight.m) || !slices.Equal(resumed.v, straight.v) {
		t.Fatal("resumed training diverged from uninterrupted training")
	}
	if resumed.Version() != straight.Version() {
		t.Fatalf("versions %d vs %d", resumed.Version(), straight.Version())
	}
}

// TestServedFileMatchesServingCopy: an engine that loads the BF16 file
// computes bit-identical logits to the trainer's in-memory ServingCopy, so
// the only train–inference mismatch is the BF16 rounding itself.
func TestServedFileMatchesServingCopy(t *testing.T) {
	m, _ := New(DefaultConfig(), 5)
	tr, _ := NewTrainer(m, DefaultTrainerConfig())
	rng := rand.New(rand.NewPCG(5, 5))
	tr.Step(Batch{Sequences: rollout(t, tr.ServingCopy(), 8, 4, rng, sampler.DefaultParams())})
	dir := t.TempDir()
	if err := tr.Model().SaveServing(dir); err != nil {
		t.Fatal(err)
	}
	served, err := LoadServing(dir)
	if err != nil {
		t.Fatal(err)
	}
	mem := tr.ServingCopy()
	a, b := make([]float32, m.VocabSize()), make([]float32, m.VocabSize())
	for _, seq := range rollout(t, mem, 4, 6, rng, sampler.DefaultParams()) {
		for i := 1; i <= len(seq.Tokens); i++ {
			served.NextLogits(seq.Tokens[:i], a)
			mem.NextLogits(seq.Tokens[:i], b)
			if !slices.Equal(a, b) {
				t.Fatalf("logits differ after %d tokens", i)
			}
		}
	}
}
