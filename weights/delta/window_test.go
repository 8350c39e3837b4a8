package delta_test

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/asyncrl/asyncrl/weights/delta"
	"github.com/asyncrl/asyncrl/weights/internal/ckpttest"
	"github.com/asyncrl/asyncrl/weights/safetensors"
	"github.com/asyncrl/asyncrl/weights/store"
)

// Tensors of a few MiB — the size of real layers, past the 256 KiB under
// which a patch is one single-segment frame — are streamed into frames
// whose window can exceed the largest tensor; Apply and VerifyPayloads
// must still decode them (they refused them with "window size exceeded"
// when their memory bound was the largest tensor + 1 MiB).
func TestMiBTensorsRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 2))
	root := t.TempDir()
	st, err := store.NewLocal(filepath.Join(root, "sync"))
	if err != nil {
		t.Fatal(err)
	}
	base := ckpttest.Random(r, 3, 6<<20) // ~2 MiB per tensor
	next := ckpttest.Update(r, base, 0.02, 0)
	dirs := []string{filepath.Join(root, "v0"), filepath.Join(root, "v1")}
	for i, ts := range [][]safetensors.Tensor{base, next} {
		if err := ckpttest.Write(dirs[i], ts, 64<<20); err != nil {
			t.Fatal(err)
		}
	}
	f := &fixture{t: t, root: root, st: st, dirs: dirs}
	m := f.publish(1, delta.DefaultEncodeConfig())
	if len(m.Tensors) == 0 {
		t.Fatal("no tensor changed")
	}
	for _, e := range m.Tensors {
		if e.UncompressedNumBytes <= 256<<10 {
			t.Fatalf("tensor %s is %d bytes: the test needs streamed (> 256 KiB) patches", e.Name, e.UncompressedNumBytes)
		}
	}
	dir, mut := f.working()
	if err := f.fetchApply(mut, 1); err != nil {
		t.Fatalf("apply: %v", err)
	}
	if d := ckpttest.SameDir(dir, dirs[1]); d != "" {
		t.Fatalf("applied checkpoint != new checkpoint: %s", d)
	}
	cache := filepath.Join(t.TempDir(), delta.DeltaDir(1))
	man, err := delta.Fetch(context.Background(), st, 1, cache, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := delta.VerifyPayloads(context.Background(), man, cache); err != nil {
		t.Fatalf("verify: %v", err)
	}
}
