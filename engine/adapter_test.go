package engine

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// seedAdapter stands in for a LoRA adapter: applied onto a HashModel of
// seed s it serves seed s·1000 + delta, so the served seed tells which
// base it adapts; a base of seed refuse is refused.
type seedAdapter struct{ delta, refuse uint64 }

func (a seedAdapter) Apply(base Model) (Model, error) {
	h := base.(*HashModel)
	if h.Seed == a.refuse {
		return nil, errors.New("does not fit this base")
	}
	c := *h
	c.Seed = h.Seed*1000 + a.delta
	return &c, nil
}

// peftDir writes a directory with adapter_config.json whose "delta" file
// the test adapter loader reads.
func peftDir(t *testing.T, delta string) string {
	t.Helper()
	d := t.TempDir()
	if err := os.WriteFile(filepath.Join(d, PEFTConfigName), []byte(`{"r": 8}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "delta"), []byte(delta), 0o644); err != nil {
		t.Fatal(err)
	}
	return d
}

func readSeedAdapter(dir string) (Adapter, error) {
	b, err := os.ReadFile(filepath.Join(dir, "delta"))
	if err != nil {
		return nil, err
	}
	d, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return nil, errors.New("bad adapter")
	}
	return seedAdapter{delta: d, refuse: 3}, nil
}

// TestPEFTAdapterOnTheServedBase: /v1/load_lora_adapter with a PEFT
// directory applies the adapter onto the served model (after the
// ModelTransform, and not transformed again) without the whole-model
// loader; requests naming it get the adapted model, the base's answers
// stay the same; every base swap re-applies it; a base it does not fit
// unloads it; a bad adapter is refused and leaves the loaded one serving.
func TestPEFTAdapterOnTheServedBase(t *testing.T) {
	loads := 0
	loader := func(string) (Model, error) { loads++; return NewHashModel(50), nil }
	xform := func(m Model) (Model, error) {
		c := *m.(*HashModel)
		c.Seed += 100
		return &c, nil
	}
	h := newHarness(t, testConfig(), WithLoader(loader), WithAdapterLoader(readSeedAdapter), WithModelTransform("x", xform))
	served := func(name string) uint64 {
		h.e.mu.Lock()
		defer h.e.mu.Unlock()
		m, ok := h.e.loras[name]
		if !ok {
			return 0
		}
		return m.(*HashModel).Seed
	}
	base := func() []int32 {
		r := h.complete(map[string]any{"prompt": "v", "max_tokens": 6, "ignore_eos": true, "seed": 1, "return_token_ids": true})
		return r.Choices[0].TokenIDs
	}
	before := base()
	dir := peftDir(t, "7")
	if code, _, out := h.post("/v1/load_lora_adapter", LoRARequest{LoRAName: "ad", LoRAPath: dir}); code != 200 {
		t.Fatalf("load: %d %s", code, out)
	}
	if got := served("ad"); got != 101*1000+7 || loads != 0 {
		t.Fatalf("adapter serves seed %d (want 101007: the transformed base 101 adapted), whole-model loads %d", got, loads)
	}
	lr := h.complete(map[string]any{"model": "ad", "prompt": "v", "max_tokens": 6, "ignore_eos": true, "seed": 1, "return_token_ids": true})
	if lr.Model != "ad" || equalIDs(lr.Choices[0].TokenIDs, before) {
		t.Fatalf("the adapter served the base: %v", lr.Choices[0].TokenIDs)
	}
	if after := base(); !equalIDs(after, before) {
		t.Fatalf("base answers changed after the adapter load: %v vs %v", after, before)
	}
	// a new base: the adapter follows it
	if err := h.e.SetModel(NewHashModel(2), 1); err != nil {
		t.Fatal(err)
	}
	if got := served("ad"); got != 102*1000+7 {
		t.Fatalf("after a base swap the adapter serves seed %d, want 102007", got)
	}
	// a bad adapter in place: refused, the loaded one keeps serving
	code, _, out := h.post("/v1/load_lora_adapter", map[string]any{"lora_name": "ad", "lora_path": peftDir(t, "x"), "load_inplace": true})
	if code != http.StatusBadRequest || !strings.Contains(string(out), "bad adapter") || served("ad") != 102007 {
		t.Fatalf("bad adapter: %d %s, serving %d", code, out, served("ad"))
	}
	// a whole-model LoRA of the same name replaces it and is not re-applied
	if err := h.e.LoadLoRA("ad", t.TempDir()); err != nil || served("ad") != 150 || loads != 1 {
		t.Fatalf("whole-model LoRA: %v, serving %d, loads %d", err, served("ad"), loads)
	}
	if err := h.e.SetModel(NewHashModel(4), 2); err != nil || served("ad") != 150 {
		t.Fatalf("whole-model LoRA after a swap: %v, serving %d", err, served("ad"))
	}
	// a base the adapter does not fit: the swap happens, the adapter goes
	h2 := newHarness(t, testConfig(), WithAdapterLoader(readSeedAdapter))
	if err := h2.e.SetModel(NewHashModel(7), 1); err != nil {
		t.Fatal(err)
	}
	if err := h2.e.LoadLoRA("fit", peftDir(t, "9")); err != nil {
		t.Fatal(err)
	}
	if err := h2.e.SetModel(NewHashModel(3), 2); err != nil || h2.e.Version() != 2 {
		t.Fatalf("swap to a base the adapter refuses: %v", err)
	}
	if code, _, _ := h2.post("/v1/completions", map[string]any{"model": "fit", "prompt": "v"}); code != http.StatusNotFound {
		t.Fatalf("an adapter that does not fit the new base still served: %d", code)
	}
}

// TestPEFTAdapterWithoutAdapterLoader: an engine without an adapter loader
// answers 501 for a PEFT directory, naming what is missing.
func TestPEFTAdapterWithoutAdapterLoader(t *testing.T) {
	h := newHarness(t, testConfig(), WithLoader(func(string) (Model, error) { return NewHashModel(5), nil }))
	code, _, out := h.post("/v1/load_lora_adapter", LoRARequest{LoRAName: "ad", LoRAPath: peftDir(t, "1")})
	if code != http.StatusNotImplemented || !strings.Contains(string(out), "no LoRA adapter loader") {
		t.Fatalf("%d %s", code, out)
	}
	if h.e.hasLoRA("ad") {
		t.Fatal("loaded anyway")
	}
}

func equalIDs(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
