package engine

import (
	"errors"
	"testing"
)

// TestModelTransform: every way a model reaches the engine — New,
// SetModel, LoadWeights and LoRA loads — serves the transform's result,
// never the model as given; a failing transform is an error naming it and
// leaves the served model and version alone.
func TestModelTransform(t *testing.T) {
	// The transform serves seed+100: the served model tells which input
	// it came from and that it went through the transform.
	xform := func(m Model) (Model, error) {
		h := m.(*HashModel)
		if h.Seed == 666 {
			return nil, errors.New("refused")
		}
		c := *h
		c.Seed += 100
		return &c, nil
	}
	loader := func(dir string) (Model, error) { return NewHashModel(uint64(len(dir))), nil }
	h := newHarness(t, testConfig(), WithLoader(loader), WithModelTransform("int4_g32", xform))
	served := func() uint64 {
		h.e.mu.Lock()
		defer h.e.mu.Unlock()
		return h.e.model.(*HashModel).Seed
	}
	if got := served(); got != 101 {
		t.Fatalf("initial model: serving seed %d, want 101 (the transform of seed 1)", got)
	}
	if err := h.e.SetModel(NewHashModel(2), 1); err != nil || served() != 102 {
		t.Fatalf("SetModel: %v, serving seed %d, want 102", err, served())
	}
	if err := h.e.LoadWeights("abcd", 2); err != nil || served() != 104 {
		t.Fatalf("LoadWeights: %v, serving seed %d, want 104", err, served())
	}
	if err := h.e.LoadLoRA("ad", "xyz"); err != nil {
		t.Fatal(err)
	}
	h.e.mu.Lock()
	lora := h.e.loras["ad"].(*HashModel).Seed
	h.e.mu.Unlock()
	if lora != 103 {
		t.Fatalf("LoRA: serving seed %d, want 103", lora)
	}
	err := h.e.SetModel(NewHashModel(666), 3)
	if err == nil || served() != 104 || h.e.Version() != 2 {
		t.Fatalf("failing transform: %v, serving seed %d at version %d", err, served(), h.e.Version())
	}
	if want := "engine: int4_g32: refused"; err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
	if _, err := New(testConfig(), NewHashModel(666), WithModelTransform("int4_g32", xform)); err == nil {
		t.Fatal("New with a model the transform refuses: no error")
	}
}
