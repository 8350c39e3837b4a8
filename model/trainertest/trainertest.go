// Package trainertest is a test helper for the packages that save and
// restore the built-in trainer (cluster/ckpt, cluster/node): a trainer
// with non-initial optimiser state, and its saved state read back for
// bit-for-bit comparison.
package trainertest

import (
	"bytes"
	"maps"
	"path/filepath"
	"testing"

	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/weights/safetensors"
)

// Trained is a trainer that has taken steps optimiser steps, so its Adam
// moments and step count are not the initial ones.
func Trained(t testing.TB, steps int) *model.Trainer {
	t.Helper()
	m, err := model.New(model.DefaultConfig(), 7)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := model.NewTrainer(m, model.DefaultTrainerConfig())
	if err != nil {
		t.Fatal(err)
	}
	b := model.Batch{Sequences: []model.Sequence{
		{Tokens: []int32{1, 40, 41, 42}, LossMask: []uint8{0, 1, 1, 1}, RolloutLogprobs: []float32{0, -4, -4, -4}, Advantage: 1},
		{Tokens: []int32{1, 50, 51}, LossMask: []uint8{0, 1, 1}, RolloutLogprobs: []float32{0, -4, -4}, Advantage: -1},
	}}
	for range steps {
		if _, err := tr.Step(b); err != nil {
			t.Fatal(err)
		}
	}
	return tr
}

// State is everything SaveTrainer writes: each tensor's bytes and the
// step and RNG metadata (the config is compared separately).
func State(t testing.TB, tr *model.Trainer) (map[string][]byte, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	if err := tr.SaveTrainer(dir); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Open(filepath.Join(dir, model.TrainerFileName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return Tensors(t, f), map[string]string{"step": f.Metadata["step"], "rng": f.Metadata["rng"]}
}

// Tensors reads every tensor of a safetensors file or checkpoint.
func Tensors(t testing.TB, src interface {
	Names() []string
	ReadTensor(string) ([]byte, safetensors.TensorInfo, error)
}) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, n := range src.Names() {
		b, _, err := src.ReadTensor(n)
		if err != nil {
			t.Fatal(err)
		}
		out[n] = b
	}
	return out
}

// Same reports whether a and b hold the same tensors, byte for byte.
func Same(a, b map[string][]byte) bool { return maps.EqualFunc(a, b, bytes.Equal) }

// ServingBytes is m's BF16 serving weights (Model.SaveServing), tensor by
// tensor.
func ServingBytes(t testing.TB, m *model.Model) map[string][]byte {
	t.Helper()
	dir := t.TempDir()
	if err := m.SaveServing(dir); err != nil {
		t.Fatal(err)
	}
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	return Tensors(t, ck)
}
