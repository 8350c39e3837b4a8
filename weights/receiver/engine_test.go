package receiver_test

import (
	"path/filepath"
	"testing"

	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/weights/delta"
	"github.com/asyncrl/asyncrl/weights/internal/ckpttest"
	"github.com/asyncrl/asyncrl/weights/receiver"
	"github.com/asyncrl/asyncrl/weights/safetensors"
	"github.com/asyncrl/asyncrl/weights/store"
)

// TestBuiltInEngineLoadsSyncedWeights drives the real built-in engine: the
// policy's serving checkpoints are published as a delta, the receiver
// brings its copy to v1 and the engine loads it through LoadWeights.
func TestBuiltInEngineLoadsSyncedWeights(t *testing.T) {
	root := t.TempDir()
	eng, r, dirs := syncedEngine(t, root, func(m *model.Model, dir string) error { return m.SaveServing(dir) })
	if eng.Version() != 1 {
		t.Fatalf("engine serves version %d, want 1", eng.Version())
	}
	// config.json comes from the base copy, the weights from the replay.
	if d := ckpttest.SameDir(r.WeightsDir(), dirs[1]); d != "" {
		t.Fatalf("the engine loaded something other than v1: %s", d)
	}
}

// syncedEngine writes versions 0 and 1 under root (policies seeded 1 and 2,
// saved by save), publishes v1 as a delta over v0's bytes, starts the
// built-in engine on v0 and has a receiver bring it to v1 through
// LoadWeights. It returns the engine (closed with the test), the receiver
// and the two version directories.
func syncedEngine(t *testing.T, root string, save func(m *model.Model, dir string) error) (*engine.Engine, *receiver.Receiver, []string) {
	t.Helper()
	dirs := []string{filepath.Join(root, "v0"), filepath.Join(root, "v1")}
	for i, d := range dirs {
		m, err := model.New(model.DefaultConfig(), uint64(i+1))
		if err != nil {
			t.Fatal(err)
		}
		if err := save(m, d); err != nil {
			t.Fatal(err)
		}
	}
	st, err := store.NewLocal(filepath.Join(root, "sync"))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := safetensors.OpenDir(dirs[0])
	b, _ := safetensors.OpenDir(dirs[1])
	_, err = delta.Encode(ctx(t), delta.DefaultEncodeConfig(), a, b, 1, st)
	a.Close()
	b.Close()
	if err != nil {
		t.Fatal(err)
	}
	load := func(dir string) (engine.Model, error) { return model.LoadServing(dir) }
	m0, err := load(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(engine.DefaultConfig(), m0, engine.WithLoader(load))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	r, err := receiver.New(receiver.DefaultConfig(filepath.Join(root, "engine0"), dirs[0]), st)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := r.Sync(ctx(t), 1, receiver.LoaderFunc(eng.LoadWeights)); err != nil || v != 1 {
		t.Fatalf("Sync = %d, %v", v, err)
	}
	return eng, r, dirs
}
