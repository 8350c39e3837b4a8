package model

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestLoadServingFromBytes: the bytes of model.safetensors load to the same
// BF16-rounded weights as LoadServing, and a config that disagrees with the
// tensors or truncated bytes are refused.
func TestLoadServingFromBytes(t *testing.T) {
	m, _ := New(DefaultConfig(), 4)
	dir := t.TempDir()
	if err := m.SaveServing(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := LoadServingFrom(m.Config(), bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	want, err := LoadServing(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.params, want.params) || got.Config() != m.Config() {
		t.Fatal("LoadServingFrom differs from LoadServing")
	}
	bad := m.Config()
	bad.Hidden = 64
	if _, err := LoadServingFrom(bad, bytes.NewReader(b), int64(len(b))); !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("mismatched config: %v", err)
	}
	if _, err := LoadServingFrom(m.Config(), bytes.NewReader(b[:len(b)/2]), int64(len(b)/2)); !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("truncated: %v", err)
	}
}
