package receiver_test

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/asyncrl/asyncrl/internal/fsutil"
	"github.com/asyncrl/asyncrl/weights/delta"
	"github.com/asyncrl/asyncrl/weights/internal/ckpttest"
	"github.com/asyncrl/asyncrl/weights/receiver"
	"github.com/asyncrl/asyncrl/weights/safetensors"
	"github.com/asyncrl/asyncrl/weights/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type env struct {
	t    *testing.T
	st   *store.Local
	dirs []string // checkpoint dir per version
}

// newEnv publishes versions 1..n of a random sharded checkpoint, each
// changing 2% of the elements.
func newEnv(t *testing.T, n int) *env {
	return newEnvWith(t, n, func(r *rand.Rand, ts []safetensors.Tensor) []safetensors.Tensor {
		return ckpttest.Update(r, ts, 0.02, 3)
	})
}

func newEnvWith(t *testing.T, n int, update func(*rand.Rand, []safetensors.Tensor) []safetensors.Tensor) *env {
	r := rand.New(rand.NewPCG(uint64(n), 9))
	root := t.TempDir()
	st, err := store.NewLocal(filepath.Join(root, "sync"))
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, st: st}
	ts := ckpttest.Random(r, 8, 128<<10)
	for v := 0; v <= n; v++ {
		if v > 0 {
			ts = update(r, ts)
		}
		d := filepath.Join(root, "ckpt", string(rune('0'+v)))
		if err := ckpttest.Write(d, ts, 48<<10); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(d, "config.json"), []byte(`{"model_type":"tiny"}`), 0o644)
		e.dirs = append(e.dirs, d)
		if v > 0 {
			e.encode(v)
		}
	}
	return e
}

func (e *env) encode(v int) {
	a, _ := safetensors.OpenDir(e.dirs[v-1])
	b, _ := safetensors.OpenDir(e.dirs[v])
	defer a.Close()
	defer b.Close()
	if _, err := delta.Encode(context.Background(), delta.DefaultEncodeConfig(), a, b, int64(v), e.st); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) receiver(root string) *receiver.Receiver {
	r, err := receiver.New(receiver.DefaultConfig(root, e.dirs[0]), e.st)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

type loads struct{ got []int64 }

func (l *loads) Load(dir string, v int64) error {
	if _, err := safetensors.OpenDir(dir); err != nil {
		return err
	}
	l.got = append(l.got, v)
	return nil
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestSyncFromScratchAndIncrementally(t *testing.T) {
	e := newEnv(t, 3)
	root := t.TempDir()
	r := e.receiver(root)
	l := &loads{}
	if v, err := r.Sync(ctx(t), 1, l); err != nil || v != 1 {
		t.Fatalf("Sync(1) = %d, %v", v, err)
	}
	if d := ckpttest.SameDir(r.WeightsDir(), e.dirs[1]); d != "" {
		t.Fatalf("weights/ at v1: %s", d)
	}
	if v, err := r.Sync(ctx(t), 3, l); err != nil || v != 3 {
		t.Fatalf("Sync(3) = %d, %v", v, err)
	}
	if d := ckpttest.SameDir(r.WeightsDir(), e.dirs[3]); d != "" {
		t.Fatalf("weights/ at v3: %s", d)
	}
	if !slices.Equal(l.got, []int64{1, 3}) {
		t.Fatalf("loads %v, want [1 3]", l.got)
	}
	// state.json has SkyRL's fields.
	raw, err := os.ReadFile(filepath.Join(root, ".skyrl_weight_sync", "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var js map[string]any
	json.Unmarshal(raw, &js)
	if js["version"] != 3.0 || js["write_in_progress"] != false || js["target_version"] != nil || js["base_model_path"] != e.dirs[0] {
		t.Fatalf("state.json = %s", raw)
	}
	// A lower target is refused; the same target is a no-op.
	if _, err := r.Apply(ctx(t), 2); !errors.Is(err, receiver.ErrVersionDecrease) {
		t.Fatalf("Apply(2) at 3: %v", err)
	}
	if v, err := r.Apply(ctx(t), 3); err != nil || v != 3 {
		t.Fatalf("Apply(3) at 3 = %d, %v", v, err)
	}
}

func TestCorruptVersionRejectedThenRepairedByResync(t *testing.T) {
	e := newEnv(t, 3)
	reg := prometheus.NewRegistry()
	cfg := receiver.DefaultConfig(t.TempDir(), e.dirs[0])
	cfg.Registerer = reg
	r, err := receiver.New(cfg, e.st)
	if err != nil {
		t.Fatal(err)
	}
	l := &loads{}
	if _, err := r.Sync(ctx(t), 1, l); err != nil {
		t.Fatal(err)
	}
	m, err := delta.ReadManifest(ctx(t), e.st, 2)
	if err != nil {
		t.Fatal(err)
	}
	payload := e.st.Path(delta.DeltaDir(2) + "/" + m.PayloadFiles[0])
	good, _ := os.ReadFile(payload)
	bad := slices.Clone(good)
	bad[len(bad)-3] ^= 0x10
	os.WriteFile(payload, bad, 0o644)

	_, err = r.Sync(ctx(t), 3, l)
	if !errors.Is(err, delta.ErrChecksum) && !errors.Is(err, delta.ErrCorrupt) {
		t.Fatalf("Sync over a corrupt v2: %v", err)
	}
	s, _, _ := r.State()
	if !s.WriteInProgress || s.Version != 1 || s.TargetVersion == nil || *s.TargetVersion != 3 {
		t.Fatalf("state after the rejection: %+v (want write_in_progress at 1)", s)
	}
	if _, err := os.Stat(filepath.Join(r.WeightsDir(), "..", "deltas", delta.DeltaDir(2))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the rejected delta is still cached: %v", err)
	}
	if _, err := r.Load(l); !errors.Is(err, receiver.ErrDirty) {
		t.Fatalf("Load of half-applied weights: %v, want ErrDirty", err)
	}
	if !slices.Equal(l.got, []int64{1}) {
		t.Fatalf("loads %v: a rejected version was loaded", l.got)
	}
	// The store is repaired; the next sync resets from the base and replays.
	os.WriteFile(payload, good, 0o644)
	if v, err := r.Sync(ctx(t), 3, l); err != nil || v != 3 {
		t.Fatalf("resync = %d, %v", v, err)
	}
	if d := ckpttest.SameDir(r.WeightsDir(), e.dirs[3]); d != "" {
		t.Fatalf("weights/ after the repair: %s", d)
	}
	// v1, then (after the reset) v1..v3 again; one rejection, two resets
	// (the first initialisation and the repair).
	want := map[string]float64{
		"asyncrl_weights_receiver_versions_applied_total":  4,
		"asyncrl_weights_receiver_versions_rejected_total": 1,
		"asyncrl_weights_receiver_resets_total":            2,
		"asyncrl_weights_receiver_version":                 3,
	}
	for name, v := range want {
		if got := gather(t, reg, name); got != v {
			t.Errorf("%s = %v, want %v", name, got, v)
		}
	}
}

func TestBrokenChainRefused(t *testing.T) {
	e := newEnv(t, 2)
	r := e.receiver(t.TempDir())
	l := &loads{}
	if _, err := r.Sync(ctx(t), 1, l); err != nil {
		t.Fatal(err)
	}
	m, _ := delta.ReadManifest(ctx(t), e.st, 2)
	m.BaseVersion = 0 // claims to apply to v0 while weights/ holds v1
	raw, _ := m.Marshal()
	if err := e.st.Commit(ctx(t), delta.ManifestKey(2), raw); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Sync(ctx(t), 2, l); !errors.Is(err, delta.ErrChain) {
		t.Fatalf("Sync over a broken chain: %v, want ErrChain", err)
	}
	if d := ckpttest.SameDir(r.WeightsDir(), e.dirs[1]); d != "" {
		t.Fatalf("a refused version touched the weights: %s", d)
	}
	if s, _, _ := r.State(); s.Version != 1 || s.WriteInProgress {
		t.Fatalf("state after a refused chain: %+v", s)
	}
}

func TestMissingVersionIsAnError(t *testing.T) {
	e := newEnv(t, 1)
	r := e.receiver(t.TempDir())
	if _, err := r.Sync(ctx(t), 2, &loads{}); !errors.Is(err, delta.ErrNoVersion) {
		t.Fatalf("Sync to an unpublished version: %v", err)
	}
}

func TestLockSerialisesReceivers(t *testing.T) {
	e := newEnv(t, 2)
	root := t.TempDir()
	a, b := e.receiver(root), e.receiver(root)
	done := make(chan error, 2)
	for _, r := range []*receiver.Receiver{a, b} {
		go func() {
			_, err := r.Sync(ctx(t), 2, &loads{})
			done <- err
		}()
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if d := ckpttest.SameDir(a.WeightsDir(), e.dirs[2]); d != "" {
		t.Fatalf("two receivers on one root: %s", d)
	}
	// A held lock makes a waiter give up when its context ends.
	f, err := os.OpenFile(filepath.Join(root, ".skyrl_weight_sync", "writer.lock"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := flock(f); err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := a.Apply(c, 2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Apply under a held lock: %v", err)
	}
}

func TestChangedBasePathResets(t *testing.T) {
	e := newEnv(t, 1)
	root := t.TempDir()
	if _, err := e.receiver(root).Sync(ctx(t), 1, &loads{}); err != nil {
		t.Fatal(err)
	}
	// Same base bytes at another path: the receiver cannot know they are
	// the same model, so it resets and replays.
	other := filepath.Join(t.TempDir(), "base")
	fsutil.CopyDir(other, e.dirs[0])
	r2, err := receiver.New(receiver.DefaultConfig(root, other), e.st)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := r2.Apply(ctx(t), 1); err != nil || v != 1 {
		t.Fatalf("Apply after a base change = %d, %v", v, err)
	}
	if s, _, _ := r2.State(); s.BaseModelPath != other {
		t.Fatalf("state base_model_path %q", s.BaseModelPath)
	}
	if d := ckpttest.SameDir(r2.WeightsDir(), e.dirs[1]); d != "" {
		t.Fatal(d)
	}
}

func TestLateJoinerStartsFromCheaperFullCheckpoint(t *testing.T) {
	// Dense (Adam-like) updates: each delta is a large part of the model, so
	// a full checkpoint of v4 is cheaper than replaying deltas 1..4.
	e := newEnvWith(t, 5, func(r *rand.Rand, ts []safetensors.Tensor) []safetensors.Tensor {
		return ckpttest.AdamLike(r, ts, 1e-2)
	})
	fm, err := delta.PublishSnapshot(ctx(t), e.st, delta.KindFull, 4, e.dirs[4], 2)
	if err != nil {
		t.Fatal(err)
	}
	var chain int64
	for v := int64(1); v <= 4; v++ {
		m, _ := delta.ReadManifest(ctx(t), e.st, v)
		chain += m.TotalCompressedNumBytes
	}
	if fm.TotalNumBytes >= chain {
		t.Fatalf("fixture: full %d bytes is not cheaper than deltas %d", fm.TotalNumBytes, chain)
	}
	root := t.TempDir()
	r := e.receiver(root)
	l := &loads{}
	if v, err := r.Sync(ctx(t), 5, l); err != nil || v != 5 {
		t.Fatalf("Sync(5) = %d, %v", v, err)
	}
	if d := ckpttest.SameDir(r.WeightsDir(), e.dirs[5]); d != "" {
		t.Fatal(d)
	}
	cache := filepath.Join(root, "deltas")
	if _, err := os.Stat(filepath.Join(cache, "full-00000004")); err != nil {
		t.Fatalf("the full checkpoint was not used: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cache, delta.DeltaDir(3))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("deltas covered by the full checkpoint were fetched: %v", err)
	}
	// With UseFull off the same join replays every delta from the base.
	cfg := receiver.DefaultConfig(t.TempDir(), e.dirs[0])
	cfg.UseFull = false
	r2, _ := receiver.New(cfg, e.st)
	if v, err := r2.Sync(ctx(t), 5, l); err != nil || v != 5 {
		t.Fatalf("Sync(5) without fulls = %d, %v", v, err)
	}
	if d := ckpttest.SameDir(r2.WeightsDir(), e.dirs[5]); d != "" {
		t.Fatal(d)
	}
	if _, err := os.Stat(filepath.Join(cfg.Root, "deltas", "full-00000004")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("UseFull=false still fetched the full checkpoint: %v", err)
	}
}

func gather(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// After the publisher pruned everything below a full checkpoint
// (delta.Prune), a late joiner starts from that checkpoint even where the
// sparse deltas would have been cheaper, and ends bit-identical; a receiver
// that already serves a version ≥ the full keeps syncing by deltas.
func TestLateJoinerAfterPruneStartsFromTheFull(t *testing.T) {
	e := newEnv(t, 6) // sparse 2% updates: deltas are far cheaper than a full checkpoint
	if _, err := delta.PublishSnapshot(ctx(t), e.st, delta.KindFull, 4, e.dirs[4], 2); err != nil {
		t.Fatal(err)
	}
	early := e.receiver(t.TempDir())
	l := &loads{}
	if v, err := early.Sync(ctx(t), 4, l); err != nil || v != 4 {
		t.Fatalf("early Sync(4) = %d, %v", v, err)
	}
	n, err := delta.Prune(ctx(t), e.st, 4)
	if err != nil || n == 0 {
		t.Fatalf("Prune(4) = %d, %v", n, err)
	}
	for v := int64(1); v < 4; v++ {
		if _, err := delta.ReadManifest(ctx(t), e.st, v); !errors.Is(err, delta.ErrNoVersion) {
			t.Fatalf("delta %d still there after Prune(4): %v", v, err)
		}
	}
	if vs, err := delta.SnapshotVersions(ctx(t), e.st, delta.KindFull); err != nil || len(vs) != 1 || vs[0] != 4 {
		t.Fatalf("fulls after Prune(4) = %v, %v; want [4]", vs, err)
	}
	late := e.receiver(t.TempDir())
	if v, err := late.Sync(ctx(t), 6, l); err != nil || v != 6 {
		t.Fatalf("late Sync(6) after the prune = %d, %v", v, err)
	}
	if d := ckpttest.SameDir(late.WeightsDir(), e.dirs[6]); d != "" {
		t.Fatal(d)
	}
	if v, err := early.Sync(ctx(t), 6, l); err != nil || v != 6 {
		t.Fatalf("early Sync(6) by deltas = %d, %v", v, err)
	}
	if d := ckpttest.SameDir(early.WeightsDir(), e.dirs[6]); d != "" {
		t.Fatal(d)
	}
}

// A checkpoint without a tensor the delta patches (tied weights, buffers)
// still advances: the tensor is skipped, warned about and counted in
// asyncrl_weights_receiver_tensors_skipped_total.
func TestTensorAbsentLocallyIsSkippedAndCounted(t *testing.T) {
	e := newEnv(t, 1)
	m, err := delta.ReadManifest(ctx(t), e.st, 1)
	if err != nil || len(m.Tensors) == 0 {
		t.Fatalf("manifest v1: %v (%d tensors)", err, len(m.Tensors))
	}
	missing := m.Tensors[0].Name
	src, err := safetensors.OpenDir(e.dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	var kept []safetensors.Tensor
	for _, name := range src.Names() {
		if name == missing {
			continue
		}
		b, info, err := src.ReadTensor(name)
		if err != nil {
			t.Fatal(err)
		}
		kept = append(kept, safetensors.Tensor{Name: name, DType: info.DType, Shape: info.Shape, Data: b})
	}
	src.Close()
	base := filepath.Join(t.TempDir(), "base")
	if err := ckpttest.Write(base, kept, 48<<10); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	cfg := receiver.DefaultConfig(t.TempDir(), base)
	cfg.Registerer = reg
	r, err := receiver.New(cfg, e.st)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := r.Sync(ctx(t), 1, &loads{}); err != nil || v != 1 {
		t.Fatalf("sync to v1 without %q = %d, %v; want the tensor skipped", missing, v, err)
	}
	if got := gather(t, reg, "asyncrl_weights_receiver_tensors_skipped_total"); got != 1 {
		t.Fatalf("skipped counter %v, want 1", got)
	}
}
