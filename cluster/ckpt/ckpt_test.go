package ckpt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/model/trainertest"
	"github.com/asyncrl/asyncrl/transport/natsbus"
	"github.com/asyncrl/asyncrl/weights/store"
)

// saveAndPrune is what a term does after each step.
func saveAndPrune(t testing.TB, st *Store, tr *model.Trainer, v int64, token uint64, durable string) (string, error) {
	t.Helper()
	ctx := context.Background()
	loc, err := st.Save(ctx, tr, v, token)
	if err != nil {
		return "", err
	}
	return loc, st.Prune(ctx, v, token, durable)
}

// natsStore is a checkpoint store in an embedded JetStream's object store
// (memory storage) and its raw object store.
func natsStore(t testing.TB, run string, memory bool) (*Store, store.Store) {
	t.Helper()
	b, err := natsbus.Connect(context.Background(), natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	raw, root, err := OpenNATS(context.Background(), b.Conn(), run, 1, memory)
	if err != nil {
		t.Fatal(err)
	}
	st, err := New(raw, root, Options{Scratch: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return st, raw
}

// checkpointNames lists the checkpoints (object prefixes) in raw.
func checkpointNames(t *testing.T, raw store.Store) []string {
	t.Helper()
	keys, err := raw.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, k := range keys {
		p, _, _ := strings.Cut(k, "/")
		seen[p] = true
	}
	return slices.Sorted(maps.Keys(seen))
}

// Save → Load through NATS restores the trainer bit-identically: master
// weights, Adam moments, step and RNG state.
func TestCheckpointRoundTripIsBitIdentical(t *testing.T) {
	st, raw := natsStore(t, "ck", true)
	ctx := context.Background()
	tr := trainertest.Trained(t, 3)
	loc, err := saveAndPrune(t, st, tr, 3, 5, "")
	if err != nil {
		t.Fatal(err)
	}
	if loc != "nats-os://asyncrl-ckpt-ck/v3-t5" {
		t.Fatalf("location %q", loc)
	}
	// The manifest describes what was uploaded next to it.
	js, err := store.ReadAll(ctx, raw, "v3-t5/"+ManifestName)
	if err != nil {
		t.Fatal(err)
	}
	var man manifest
	if err := json.Unmarshal(js, &man); err != nil || man.Version != 3 || man.Token != 5 || len(man.Files) < 2 {
		t.Fatalf("manifest %s: %v", js, err)
	}
	dir := filepath.Join(t.TempDir(), "resume")
	v, err := st.Load(ctx, loc, dir)
	if err != nil || v != 3 {
		t.Fatalf("load: version %d, err %v", v, err)
	}
	got, err := model.LoadTrainer(dir)
	if err != nil {
		t.Fatal(err)
	}
	wantT, wantMD := trainertest.State(t, tr)
	gotT, gotMD := trainertest.State(t, got)
	if len(wantT) == 0 || !trainertest.Same(gotT, wantT) || !maps.Equal(gotMD, wantMD) || got.Version() != 3 {
		t.Fatalf("restored trainer differs: %d/%d tensors, metadata %v vs %v, version %d", len(gotT), len(wantT), gotMD, wantMD, got.Version())
	}
}

// Saves with the durable progress one version behind keep two
// checkpoints; an older term's leftovers go, a newer term's stay.
func TestCheckpointPruningKeepsTwo(t *testing.T) {
	st, raw := natsStore(t, "ck", true)
	ctx := context.Background()
	// Each checkpoint holds a trainer of its version, so it loads.
	trs := map[int64]*model.Trainer{}
	tr := func(v int64) *model.Trainer {
		if trs[v] == nil {
			trs[v] = trainertest.Trained(t, int(v))
		}
		return trs[v]
	}
	// A newer term (token 9) exists: term 3 below is deposed.
	if _, err := saveAndPrune(t, st, tr(5), 5, 9, ""); err != nil {
		t.Fatal(err)
	}
	// A previous term (token 1) left v1 (durable when term 3 starts) and
	// v2 (saved, never recorded: it was deposed).
	old1, err := saveAndPrune(t, st, tr(1), 1, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := saveAndPrune(t, st, tr(2), 2, 1, old1); err != nil {
		t.Fatal(err)
	}
	durable := old1
	for v := int64(2); v <= 5; v++ {
		loc, err := saveAndPrune(t, st, tr(v), v, 3, durable)
		if err != nil {
			t.Fatal(err)
		}
		durable = loc // the step's progress is recorded
	}
	want := []string{"v4-t3", "v5-t3", "v5-t9"}
	if got := checkpointNames(t, raw); !slices.Equal(got, want) {
		t.Fatalf("checkpoints %v, want %v", got, want)
	}
	// The durable checkpoint survives even when saves run ahead of the
	// progress (three saves, nothing recorded).
	for v := int64(6); v <= 8; v++ {
		if _, err := saveAndPrune(t, st, tr(v), v, 3, durable); err != nil {
			t.Fatal(err)
		}
	}
	want = []string{"v5-t3", "v5-t9", "v6-t3", "v7-t3", "v8-t3"}
	if got := checkpointNames(t, raw); !slices.Equal(got, want) {
		t.Fatalf("checkpoints %v, want %v", got, want)
	}
	if _, err := st.Load(ctx, durable, t.TempDir()); err != nil {
		t.Fatalf("the durable checkpoint: %v", err)
	}
}

func TestPrunable(t *testing.T) {
	for _, c := range []struct {
		name    string
		token   uint64
		durable string
		want    bool
	}{
		{"v3-t2", 2, "v3-t2", false}, // the durable one
		{"v9-t3", 2, "v3-t2", false}, // a newer term's
		{"v2-t1", 2, "v3-t2", true},  // an older term's
		{"v4-t1", 2, "v3-t1", true},  // an older term's above the durable one: fenced, never recorded
		{"v3-t1", 2, "v3-t1", false}, // the older term's durable one
		{"v2-t2", 2, "v3-t2", true},  // this term's, older than the durable one
		{"v4-t2", 2, "v3-t2", false}, // this term's, not yet recorded
		{"v1-t2", 2, "v3-t1", false}, // this term's while none of them is durable
		{"v1-t2", 2, "", false},
		{"v1-t1", 2, "", true},
		{"junk", 2, "", false},
		{"v1-tx", 2, "", false},
	} {
		if got := Prunable(c.name, c.token, c.durable); got != c.want {
			t.Errorf("Prunable(%q, token %d, durable %q) = %v, want %v", c.name, c.token, c.durable, got, c.want)
		}
	}
}

// A location whose objects are missing, incomplete or corrupt is an
// ErrCheckpoint at once (no store call retried) naming the cause.
func TestCheckpointMissingOrCorruptFailsClearly(t *testing.T) {
	st, raw := natsStore(t, "ck", true)
	ctx := context.Background()
	tr := trainertest.Trained(t, 2)
	loc, err := saveAndPrune(t, st, tr, 2, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	expect := func(what, loc, want string) {
		t.Helper()
		before := st.Retries()
		_, err := st.Load(ctx, loc, t.TempDir())
		if !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: err %v; want ErrCheckpoint mentioning %q", what, err, want)
		}
		if n := st.Retries() - before; n != 0 {
			t.Errorf("%s: %d store calls retried; a missing or corrupt checkpoint is not transient", what, n)
		}
	}
	expect("never saved", st.Location("v7-t1"), "no manifest")
	expect("another bucket", "nats-os://asyncrl-ckpt-other/v2-t1", "is not in")
	expect("not a checkpoint name", st.Location("latest"), "not v<version>-t<token>")
	// A file replaced by other bytes: the manifest's SHA-256 catches it.
	if err := store.PutBytes(ctx, raw, "v2-t1/"+model.TrainerFileName, []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	expect("corrupt file", loc, "SHA-256")
	// A file gone.
	if err := raw.Delete(ctx, "v2-t1/"+model.ConfigFileName); err != nil {
		t.Fatal(err)
	}
	expect("missing file", loc, "missing")
	// A manifest that does not describe a loadable trainer of its version.
	loc3, err := saveAndPrune(t, st, tr, 3, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	expect("wrong version", loc3, "holds a trainer at version 2")
}

// fakeClock is Options.Now and Options.Sleep: a pause advances the clock.
type fakeClock struct {
	mu     sync.Mutex
	t      time.Time
	pauses []time.Duration
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	c.pauses = append(c.pauses, d)
	return ctx.Err()
}

func (c *fakeClock) slept() (total time.Duration, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range c.pauses {
		total += d
	}
	return total, len(c.pauses)
}

// flaky is a Store whose calls fail with fail's error (nil: pass through
// to the local store). A failing Put reads part of its object first, as a
// transfer cut midway does.
type flaky struct {
	store.Store
	mu   sync.Mutex
	fail func(op, key string) error
}

func (f *flaky) err(op, key string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail == nil {
		return nil
	}
	return f.fail(op, key)
}

func (f *flaky) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := f.err("put", key); err != nil {
		_, _ = io.CopyN(io.Discard, r, 100)
		return err
	}
	return f.Store.Put(ctx, key, r, size)
}

func (f *flaky) Commit(ctx context.Context, key string, data []byte) error {
	if err := f.err("commit", key); err != nil {
		return err
	}
	return f.Store.Commit(ctx, key, data)
}

func (f *flaky) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := f.err("get", key); err != nil {
		return nil, err
	}
	return f.Store.Get(ctx, key)
}

func (f *flaky) setFail(fail func(op, key string) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = fail
}

// localStore is a checkpoint store on a local directory behind flaky,
// with a fake clock.
func localStore(t *testing.T) (*Store, *flaky, *fakeClock) {
	t.Helper()
	l, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fl := &flaky{Store: l}
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	st, err := New(fl, "nats-os://asyncrl-ckpt-x", Options{Scratch: t.TempDir(), Now: clk.now, Sleep: clk.sleep})
	if err != nil {
		t.Fatal(err)
	}
	return st, fl, clk
}

// A store that stalls (a stream electing a leader after a node died) is
// retried for RetryWithin and no longer: then the restore fails naming
// the location and the stall, and it is not ErrCheckpoint (the
// checkpoint itself may be fine).
func TestCheckpointStalledStoreGivesUpAfterRetryBound(t *testing.T) {
	st, fl, clk := localStore(t)
	ctx := context.Background()
	loc, err := st.Save(ctx, trainertest.Trained(t, 1), 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	fl.setFail(func(op, key string) error { return fmt.Errorf("get %s: %w", key, store.ErrStalled) })
	_, err = st.Load(ctx, loc, t.TempDir())
	if !errors.Is(err, store.ErrStalled) || !errors.Is(err, errRetryBound) || errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), loc) {
		t.Fatalf("load from a stalled store: %v; want the stall after the retry bound, naming %s", err, loc)
	}
	total, n := clk.slept()
	if total > RetryWithin || total < RetryWithin-st.opts.Retry.MaxDelay || int64(n) != st.Retries() {
		t.Fatalf("paused %s over %d retries (%d counted); want just under %s", total, n, st.Retries(), RetryWithin)
	}
	// Each store call has its own bound: a save after the stall ended
	// retries again, and one that rides out a short stall succeeds.
	left := 3
	fl.setFail(func(op, key string) error {
		if left > 0 {
			left--
			return fmt.Errorf("%s %s: %w", op, key, store.ErrStalled)
		}
		return nil
	})
	before := st.Retries()
	if _, err := st.Load(ctx, loc, t.TempDir()); err != nil {
		t.Fatalf("load through a short stall: %v", err)
	}
	if got := st.Retries() - before; got != 3 {
		t.Fatalf("%d retries through 3 failures", got)
	}
}

// A put cut midway is retried from the file's start: the checkpoint
// restores (its SHA-256s match), and one whose objects could not all be
// stored has no manifest, so it is not a checkpoint.
func TestCheckpointSaveRetriesAndCommitsManifestLast(t *testing.T) {
	st, fl, _ := localStore(t)
	ctx := context.Background()
	tr := trainertest.Trained(t, 2)
	fails := map[string]int{}
	fl.setFail(func(op, key string) error {
		if op == "put" && fails[key] < 2 {
			fails[key]++
			return fmt.Errorf("put %s: nats: timeout", key)
		}
		return nil
	})
	loc, err := st.Save(ctx, tr, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(fails) < 2 {
		t.Fatalf("puts failed %v; want each file's", fails)
	}
	dir := t.TempDir()
	if v, err := st.Load(ctx, loc, dir); err != nil || v != 2 {
		t.Fatalf("load after retried puts: v%d %v", v, err)
	}
	// The store dies for good after the files: the manifest is never
	// committed, and the partial checkpoint is refused.
	var order []string
	fl.setFail(func(op, key string) error {
		order = append(order, op+" "+path.Base(key))
		if op == "commit" {
			return errors.New("nats: no responders available")
		}
		return nil
	})
	if _, err := st.Save(ctx, tr, 3, 4); err == nil || !strings.Contains(err.Error(), "manifest") {
		t.Fatalf("save with the manifest refused: %v", err)
	}
	if last := order[len(order)-1]; last != "commit "+ManifestName || slices.Contains(order[:len(order)-1], "put "+ManifestName) {
		t.Fatalf("calls %v: the manifest must be committed after every file", order)
	}
	fl.setFail(nil)
	if _, err := st.Load(ctx, st.Location(Name(3, 4)), t.TempDir()); !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), "no manifest") {
		t.Fatalf("a checkpoint without its manifest: %v", err)
	}
}

// A manifest whose checksum, size, file name or version disagrees with
// the checkpoint is refused before the trainer is used.
func TestCheckpointManifestMismatchRefused(t *testing.T) {
	st, fl, _ := localStore(t)
	ctx := context.Background()
	loc, err := st.Save(ctx, trainertest.Trained(t, 1), 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	key := Name(1, 2) + "/" + ManifestName
	orig, err := store.ReadAll(ctx, fl, key)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what, want string
		edit       func(*manifest)
	}{
		{"checksum", "SHA-256", func(m *manifest) { m.Files[0].SHA256 = strings.Repeat("0", 64) }},
		{"size", "SHA-256", func(m *manifest) { m.Files[1].Size++ }},
		{"escaping name", "manifest names file", func(m *manifest) { m.Files[0].Name = "../" + m.Files[0].Name }},
		{"version", "manifest says version 2", func(m *manifest) { m.Version = 2 }},
		{"token", "token 3", func(m *manifest) { m.Token = 3 }},
		{"no files", "with 0 files", func(m *manifest) { m.Files = nil }},
	} {
		var m manifest
		if err := json.Unmarshal(orig, &m); err != nil {
			t.Fatal(err)
		}
		c.edit(&m)
		js, _ := json.Marshal(m)
		if err := fl.Commit(ctx, key, js); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Load(ctx, loc, t.TempDir()); !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want ErrCheckpoint mentioning %q", c.what, err, c.want)
		}
	}
	if err := fl.Commit(ctx, key, []byte("{")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Load(ctx, loc, t.TempDir()); !errors.Is(err, ErrCheckpoint) {
		t.Errorf("unparsable manifest: %v", err)
	}
	if err := fl.Commit(ctx, key, orig); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Load(ctx, loc, t.TempDir()); err != nil {
		t.Fatalf("the original manifest: %v", err)
	}
}

func TestNewRequiresScratch(t *testing.T) {
	l, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(l, "nats-os://b", Options{}); err == nil || !strings.Contains(err.Error(), "Scratch") {
		t.Fatalf("no scratch dir: %v", err)
	}
	if _, err := New(l, "nats-os://b", Options{Scratch: t.TempDir(), Retry: store.RetryConfig{Attempts: -1, BaseDelay: 1}}); err == nil {
		t.Fatal("a bad retry config was accepted")
	}
}

// A second node opens the bucket the first created (its config is not
// the second's to rewrite) and reads its checkpoints.
func TestOpenNATSSharesTheBucket(t *testing.T) {
	b, err := natsbus.Connect(context.Background(), natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	scratch := t.TempDir()
	open := func(memory bool) *Store {
		raw, root, err := OpenNATS(ctx, b.Conn(), "shared", 1, memory)
		if err != nil {
			t.Fatal(err)
		}
		st, err := New(raw, root, Options{Scratch: scratch})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	loc, err := open(true).Save(ctx, trainertest.Trained(t, 1), 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	// file storage asked for, but the bucket exists in memory: opened as is.
	if v, err := open(false).Load(ctx, loc, filepath.Join(t.TempDir(), "r")); err != nil || v != 1 {
		t.Fatalf("second opener: v%d %v", v, err)
	}
	if ents, _ := os.ReadDir(scratch); len(ents) != 0 {
		t.Fatalf("save left %d entries in the scratch dir", len(ents))
	}
}

// BenchmarkCheckpointSave measures one checkpoint upload of the built-in
// policy (SaveTrainer + put + manifest + prune) to an embedded
// JetStream's file store.
func BenchmarkCheckpointSave(b *testing.B) {
	st, _ := natsStore(b, "bench", false)
	tr := trainertest.Trained(b, 1)
	durable := ""
	b.ResetTimer()
	for i := range b.N {
		loc, err := saveAndPrune(b, st, tr, int64(i+1), 1, durable)
		if err != nil {
			b.Fatal(err)
		}
		durable = loc
	}
}
