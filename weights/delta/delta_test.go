package delta_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/asyncrl/asyncrl/internal/fsutil"
	"github.com/asyncrl/asyncrl/weights/delta"
	"github.com/asyncrl/asyncrl/weights/internal/ckpttest"
	"github.com/asyncrl/asyncrl/weights/safetensors"
	"github.com/asyncrl/asyncrl/weights/store"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fixture struct {
	t      *testing.T
	root   string
	st     *store.Local
	ckpts  [][]safetensors.Tensor // ckpts[v] = checkpoint at version v
	dirs   []string
	shardB int64
}

// newFixture makes a random sharded BF16 base and `versions` updates with
// 1–3% of elements changed (every 4th tensor frozen).
func newFixture(t *testing.T, seed uint64, versions int) *fixture {
	r := rand.New(rand.NewPCG(seed, 2))
	f := &fixture{t: t, root: t.TempDir(), shardB: 96 << 10}
	var err error
	if f.st, err = store.NewLocal(filepath.Join(f.root, "sync")); err != nil {
		t.Fatal(err)
	}
	f.ckpts = append(f.ckpts, ckpttest.Random(r, 10, 256<<10))
	for v := 1; v <= versions; v++ {
		f.ckpts = append(f.ckpts, ckpttest.Update(r, f.ckpts[v-1], 0.01+0.02*r.Float64(), 4))
	}
	for v, ts := range f.ckpts {
		d := filepath.Join(f.root, "ckpt", string(rune('0'+v)))
		if err := ckpttest.Write(d, ts, f.shardB); err != nil {
			t.Fatal(err)
		}
		f.dirs = append(f.dirs, d)
	}
	return f
}

func (f *fixture) open(v int) *safetensors.Checkpoint {
	c, err := safetensors.OpenDir(f.dirs[v])
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { c.Close() })
	return c
}

func (f *fixture) publish(v int, cfg delta.EncodeConfig) *delta.Manifest {
	f.t.Helper()
	m, err := delta.Encode(context.Background(), cfg, f.open(v-1), f.open(v), int64(v), f.st)
	if err != nil {
		f.t.Fatalf("encode v%d: %v", v, err)
	}
	return m
}

// working returns a mutable copy of version 0.
func (f *fixture) working() (string, *delta.Mutable) {
	d := filepath.Join(f.t.TempDir(), "weights")
	if err := fsutil.CopyDir(d, f.dirs[0]); err != nil {
		f.t.Fatal(err)
	}
	m, err := delta.OpenMutable(d)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { m.Close() })
	return d, m
}

func (f *fixture) fetchApply(mut *delta.Mutable, v int) error {
	cache := filepath.Join(f.t.TempDir(), delta.DeltaDir(int64(v)))
	man, err := delta.Fetch(context.Background(), f.st, int64(v), cache, 3)
	if err != nil {
		return err
	}
	_, err = delta.Apply(context.Background(), delta.DefaultApplyConfig(), man, cache, mut)
	return err
}

// A tensor the delta patches but the local checkpoint lacks (a tied
// lm_head, a buffer) is skipped and reported, not a failed version: SkyRL's
// publisher skips such tensors with a warning (NovaSky-AI/SkyRL
// skyrl/backends/skyrl_train/weight_sync/delta_checkpoint.py,
// DeltaCheckpointPublisher._publish_local, "skipped_tensors").
// The publishing side, as SkyRL's DeltaCheckpointPublisher (skipped_tensors):
// a tensor of the new checkpoint that the base lacks is skipped and listed,
// and manifest.json stays SkyRL's (no extra key).
func TestEncodeSkipsTensorAbsentFromBase(t *testing.T) {
	f := newFixture(t, 8, 1)
	base, _ := delta.NewMemSource(f.ckpts[0][1:])
	m, err := delta.Encode(context.Background(), delta.DefaultEncodeConfig(), base, f.open(1), 1, f.st)
	if err != nil {
		t.Fatalf("encode with a tensor only the new checkpoint has: %v, want it skipped", err)
	}
	if !slices.Equal(m.Skipped, []string{f.ckpts[0][0].Name}) {
		t.Fatalf("skipped %v, want [%s]", m.Skipped, f.ckpts[0][0].Name)
	}
	for _, e := range m.Tensors {
		if e.Name == f.ckpts[0][0].Name {
			t.Fatal("the skipped tensor is in the manifest")
		}
	}
	js, err := m.Marshal()
	if err != nil || bytes.Contains(js, []byte("kipped")) {
		t.Fatalf("manifest.json %s (%v) carries the skip list", js, err)
	}
}

func TestApplySkipsTensorAbsentFromCheckpoint(t *testing.T) {
	f := newFixture(t, 7, 1)
	m := f.publish(1, delta.DefaultEncodeConfig())
	if len(m.Tensors) < 2 {
		t.Fatalf("fixture changed %d tensors, want ≥ 2", len(m.Tensors))
	}
	missing := m.Tensors[0].Name
	without := func(ts []safetensors.Tensor) []safetensors.Tensor {
		var out []safetensors.Tensor
		for _, x := range ts {
			if x.Name != missing {
				out = append(out, x)
			}
		}
		return out
	}
	dir := filepath.Join(t.TempDir(), "weights")
	if err := ckpttest.Write(dir, without(f.ckpts[0]), f.shardB); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(t.TempDir(), "want")
	if err := ckpttest.Write(want, without(f.ckpts[1]), f.shardB); err != nil {
		t.Fatal(err)
	}
	mut, err := delta.OpenMutable(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer mut.Close()
	cache := filepath.Join(t.TempDir(), delta.DeltaDir(1))
	man, err := delta.Fetch(context.Background(), f.st, 1, cache, 3)
	if err != nil {
		t.Fatal(err)
	}
	res, err := delta.Apply(context.Background(), delta.DefaultApplyConfig(), man, cache, mut)
	if err != nil {
		t.Fatalf("apply with a tensor absent locally: %v, want it skipped", err)
	}
	if !slices.Equal(res.Skipped, []string{missing}) || res.Patched != len(m.Tensors)-1 {
		t.Fatalf("result %+v, want %q skipped and %d patched", res, missing, len(m.Tensors)-1)
	}
	if d := ckpttest.SameDir(dir, want); d != "" {
		t.Fatalf("the other tensors were not patched to v1: %s", d)
	}
}

func TestRoundTripByteForByte(t *testing.T) {
	f := newFixture(t, 1, 1)
	cfg := delta.DefaultEncodeConfig()
	cfg.MaxFileSizeGB = 1.0 / (1 << 20) // 1 KiB: several payload files
	m := f.publish(1, cfg)
	if len(m.PayloadFiles) < 2 {
		t.Fatalf("a 1 KiB limit gave %d payload files", len(m.PayloadFiles))
	}
	if len(m.Tensors) == 0 || len(m.Tensors) >= 10 {
		t.Fatalf("%d tensors changed; the fixture freezes every 4th of 10", len(m.Tensors))
	}
	// Each payload file stays under the limit unless it holds one patch.
	perFile := map[string][]int64{}
	for _, e := range m.Tensors {
		perFile[e.PayloadFile] = append(perFile[e.PayloadFile], e.CompressedNumBytes)
	}
	for i, name := range m.PayloadFiles {
		if want := delta.PayloadFileName(0, i); name != want {
			t.Fatalf("payload file %d named %s, want %s", i, name, want)
		}
		var sum int64
		for _, c := range perFile[name] {
			sum += c
		}
		if sum > 1<<10 && len(perFile[name]) > 1 {
			t.Fatalf("%s holds %d compressed bytes in %d patches, over the 1 KiB limit", name, sum, len(perFile[name]))
		}
	}
	if m.TotalCompressedNumBytes >= m.TotalUncompressedNumBytes/4 {
		t.Fatalf("compressed %d of %d bytes: a 1–3%% update should shrink far more", m.TotalCompressedNumBytes, m.TotalUncompressedNumBytes)
	}
	dir, mut := f.working()
	if err := f.fetchApply(mut, 1); err != nil {
		t.Fatal(err)
	}
	if d := ckpttest.SameDir(dir, f.dirs[1]); d != "" {
		t.Fatalf("applied checkpoint != new checkpoint: %s", d)
	}
}

func TestLateJoinReplaysV0ToV3(t *testing.T) {
	f := newFixture(t, 2, 3)
	for v := 1; v <= 3; v++ {
		f.publish(v, delta.DefaultEncodeConfig())
	}
	vs, err := delta.Versions(context.Background(), f.st)
	if err != nil || !slices.Equal(vs, []int64{1, 2, 3}) {
		t.Fatalf("Versions = %v, %v", vs, err)
	}
	dir, mut := f.working()
	for v := 1; v <= 3; v++ {
		if err := f.fetchApply(mut, v); err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
	}
	if d := ckpttest.SameDir(dir, f.dirs[3]); d != "" {
		t.Fatalf("v0→v3 replay != v3: %s", d)
	}
}

func TestUnchangedPublishAdvancesWithEmptyManifest(t *testing.T) {
	f := newFixture(t, 3, 0)
	m, err := delta.Encode(context.Background(), delta.DefaultEncodeConfig(), f.open(0), f.open(0), 1, f.st)
	if err != nil {
		t.Fatal(err)
	}
	if m.Version != 1 || m.BaseVersion != 0 || len(m.Tensors) != 0 || len(m.PayloadFiles) != 0 {
		t.Fatalf("unchanged publish: %+v", m)
	}
	raw, err := store.ReadAll(context.Background(), f.st, delta.ManifestKey(1))
	if err != nil {
		t.Fatal(err)
	}
	var js map[string]any
	if err := json.Unmarshal(raw, &js); err != nil {
		t.Fatal(err)
	}
	if ts, ok := js["tensors"].([]any); !ok || len(ts) != 0 {
		t.Fatalf(`"tensors" = %#v, want []`, js["tensors"])
	}
	if pf, ok := js["payload_files"].([]any); !ok || len(pf) != 0 {
		t.Fatalf(`"payload_files" = %#v, want []`, js["payload_files"])
	}
	dir, mut := f.working()
	if err := f.fetchApply(mut, 1); err != nil {
		t.Fatal(err)
	}
	if d := ckpttest.SameDir(dir, f.dirs[0]); d != "" {
		t.Fatal(d)
	}
}

func TestCorruptPayloadAndChecksumRejected(t *testing.T) {
	f := newFixture(t, 4, 1)
	m := f.publish(1, delta.DefaultEncodeConfig())
	payload := f.st.Path(delta.DeltaDir(1) + "/" + m.PayloadFiles[0])
	orig, err := os.ReadFile(payload)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("flipped payload byte", func(t *testing.T) {
		bad := slices.Clone(orig)
		bad[len(bad)-5] ^= 0x40 // inside the last patch's zstd frame
		if err := os.WriteFile(payload, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.WriteFile(payload, orig, 0o644)
		_, mut := f.working()
		err := f.fetchApply(mut, 1)
		if !errors.Is(err, delta.ErrCorrupt) && !errors.Is(err, delta.ErrChecksum) {
			t.Fatalf("corrupted payload applied: %v", err)
		}
	})
	t.Run("wrong checksum", func(t *testing.T) {
		bm := *m
		bm.Tensors = slices.Clone(m.Tensors)
		bm.Tensors[0].Checksum = "00000000000000000000000000000000"
		raw, _ := bm.Marshal()
		key := delta.ManifestKey(1)
		good, _ := store.ReadAll(context.Background(), f.st, key)
		if err := f.st.Commit(context.Background(), key, raw); err != nil {
			t.Fatal(err)
		}
		defer f.st.Commit(context.Background(), key, good)
		_, mut := f.working()
		err := f.fetchApply(mut, 1)
		if !errors.Is(err, delta.ErrChecksum) {
			t.Fatalf("wrong checksum: %v, want ErrChecksum", err)
		}
		if !bytes.Contains([]byte(err.Error()), []byte(m.Tensors[0].Name)) {
			t.Fatalf("error %q does not name the tensor", err)
		}
	})
	t.Run("repaired copy applies again", func(t *testing.T) {
		dir, mut := f.working()
		if err := f.fetchApply(mut, 1); err != nil {
			t.Fatal(err)
		}
		if d := ckpttest.SameDir(dir, f.dirs[1]); d != "" {
			t.Fatal(d)
		}
	})
}

// commitFails is a store whose Commit fails: a crash between the payloads
// and the manifest.
type commitFails struct{ store.Store }

func (commitFails) Commit(context.Context, string, []byte) error { return errors.New("crash") }

func TestCrashBeforeManifestLeavesVersionInvisible(t *testing.T) {
	f := newFixture(t, 5, 1)
	_, err := delta.Encode(context.Background(), delta.DefaultEncodeConfig(), f.open(0), f.open(1), 1, commitFails{f.st})
	if err == nil {
		t.Fatal("encode with a failing commit succeeded")
	}
	keys, _ := f.st.List(context.Background(), delta.DeltaDir(1)+"/")
	if len(keys) == 0 {
		t.Fatal("no payloads written: the test does not exercise the crash window")
	}
	if vs, _ := delta.Versions(context.Background(), f.st); len(vs) != 0 {
		t.Fatalf("Versions = %v after a crash before the manifest", vs)
	}
	if _, err := delta.Fetch(context.Background(), f.st, 1, t.TempDir(), 2); !errors.Is(err, delta.ErrNoVersion) {
		t.Fatalf("Fetch of the uncommitted version: %v", err)
	}
	// The retry overwrites the orphans and commits.
	f.publish(1, delta.DefaultEncodeConfig())
	dir, mut := f.working()
	if err := f.fetchApply(mut, 1); err != nil {
		t.Fatal(err)
	}
	if d := ckpttest.SameDir(dir, f.dirs[1]); d != "" {
		t.Fatal(d)
	}
}

func TestEncodeRefusesCommittedVersionAndMismatch(t *testing.T) {
	f := newFixture(t, 6, 1)
	f.publish(1, delta.DefaultEncodeConfig())
	if _, err := delta.Encode(context.Background(), delta.DefaultEncodeConfig(), f.open(0), f.open(1), 1, f.st); err == nil {
		t.Fatal("re-encoding a committed version succeeded")
	}
	// A base tensor the new checkpoint lacks cannot be expressed as a delta.
	fewer, _ := delta.NewMemSource(f.ckpts[1][:3])
	if _, err := delta.Encode(context.Background(), delta.DefaultEncodeConfig(), f.open(1), fewer, 2, f.st); !errors.Is(err, delta.ErrMismatch) {
		t.Fatalf("new checkpoint missing base tensors: %v, want ErrMismatch", err)
	}
	reshaped := slices.Clone(f.ckpts[1])
	reshaped[0].Shape = []int64{reshaped[0].Shape[0] * reshaped[0].Shape[1]}
	if len(f.ckpts[1][0].Shape) != 2 {
		t.Fatal("fixture's first tensor should be 2-D")
	}
	rs, err := delta.NewMemSource(reshaped)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := delta.Encode(context.Background(), delta.DefaultEncodeConfig(), f.open(1), rs, 2, f.st); !errors.Is(err, delta.ErrMismatch) {
		t.Fatalf("different shapes: %v, want ErrMismatch", err)
	}
}

func TestCastsNewToBaseDType(t *testing.T) {
	f := newFixture(t, 7, 1)
	// The trainer hands float32 weights; the base is BF16.
	var f32 []safetensors.Tensor
	for _, tn := range f.ckpts[1] {
		x, _ := safetensors.DecodeFloat32(tn.DType, tn.Data, nil)
		f32 = append(f32, safetensors.Tensor{Name: tn.Name, DType: safetensors.F32, Shape: tn.Shape, Data: safetensors.EncodeF32(x)})
	}
	src, err := delta.NewMemSource(f32)
	if err != nil {
		t.Fatal(err)
	}
	m, err := delta.Encode(context.Background(), delta.DefaultEncodeConfig(), f.open(0), src, 1, f.st)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range m.Tensors {
		if e.DType != "bfloat16" {
			t.Fatalf("tensor %s written as %s, want the base dtype bfloat16", e.Name, e.DType)
		}
	}
	dir, mut := f.working()
	if err := f.fetchApply(mut, 1); err != nil {
		t.Fatal(err)
	}
	if d := ckpttest.SameDir(dir, f.dirs[1]); d != "" {
		t.Fatalf("F32→BF16 publish did not reproduce the BF16 checkpoint: %s", d)
	}
}

func TestDeterministicOutput(t *testing.T) {
	f := newFixture(t, 8, 1)
	cfg := delta.DefaultEncodeConfig()
	cfg.Workers = 3
	cfg.MaxFileSizeGB = 4.0 / (1 << 20)
	a := f.publish(1, cfg)
	other, _ := store.NewLocal(t.TempDir())
	cfg.Workers = 1
	b, err := delta.Encode(context.Background(), cfg, f.open(0), f.open(1), 1, other)
	if err != nil {
		t.Fatal(err)
	}
	ja, _ := a.Marshal()
	jb, _ := b.Marshal()
	if !bytes.Equal(ja, jb) {
		t.Fatal("3 workers and 1 worker wrote different manifests")
	}
}

func TestXXH3HexMatchesPythonXXHash(t *testing.T) {
	// python: xxhash.xxh3_128(b"").hexdigest() — the canonical big-endian
	// form, high 64 bits first.
	if got := delta.XXH3Hex(nil); got != "99aa06d3014798d86001c324468d497f" {
		t.Fatalf("xxh3-128 of empty = %s", got)
	}
	if got, _ := delta.Checksum(delta.ChecksumSHA256, []byte("abc")); got != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Fatalf("sha256(abc) = %s", got)
	}
}

func TestSHA256ChecksumsApply(t *testing.T) {
	f := newFixture(t, 9, 1)
	cfg := delta.DefaultEncodeConfig()
	cfg.ChecksumAlgorithm = delta.ChecksumSHA256
	m := f.publish(1, cfg)
	if m.Tensors[0].ChecksumAlgorithm != "sha256" || len(m.Tensors[0].Checksum) != 64 {
		t.Fatalf("entry %+v", m.Tensors[0])
	}
	dir, mut := f.working()
	if err := f.fetchApply(mut, 1); err != nil {
		t.Fatal(err)
	}
	if d := ckpttest.SameDir(dir, f.dirs[1]); d != "" {
		t.Fatal(d)
	}
}

// TestManifestGolden pins manifest.json's exact field names, order and JSON
// shape (reference/skyrl.md); regenerate with -update only on purpose.
func TestManifestGolden(t *testing.T) {
	m := &delta.Manifest{
		Version: 3, BaseVersion: 2,
		Tensors: []delta.TensorEntry{{
			Name: "model.layers.0.mlp.down_proj.weight", DType: "bfloat16", Shape: []int64{4, 2},
			UncompressedNumBytes: 16, CompressedNumBytes: 13,
			PayloadFile: "delta-rank00000-file000000.safetensors", PayloadKey: "model.layers.0.mlp.down_proj.weight",
			Checksum: "99aa06d3014798d86001c324468d497f", ChecksumAlgorithm: "xxh3-128",
		}},
		TotalUncompressedNumBytes: 16, TotalCompressedNumBytes: 13,
		PayloadFiles: []string{"delta-rank00000-file000000.safetensors"},
	}
	got, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "manifest.golden.json")
	if *update {
		os.WriteFile(golden, got, 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("manifest JSON changed:\n%s\nwant:\n%s", got, want)
	}
	back, err := delta.ParseManifest(want)
	if err != nil {
		t.Fatal(err)
	}
	if back.Tensors[0].PayloadKey != m.Tensors[0].PayloadKey || back.Version != 3 {
		t.Fatalf("parse of the golden manifest: %+v", back)
	}
	// Exactly the reference's keys, no more.
	var top map[string]json.RawMessage
	json.Unmarshal(want, &top)
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range top {
			if !yield(k) {
				return
			}
		}
	})
	if !slices.Equal(keys, []string{"base_version", "payload_files", "tensors", "total_compressed_num_bytes", "total_uncompressed_num_bytes", "version"}) {
		t.Fatalf("top-level keys %v", keys)
	}
}

func TestManifestValidation(t *testing.T) {
	good := func() delta.Manifest {
		return delta.Manifest{
			Version: 2, BaseVersion: 1,
			Tensors: []delta.TensorEntry{{Name: "w", DType: "bfloat16", Shape: []int64{3}, UncompressedNumBytes: 6, CompressedNumBytes: 5,
				PayloadFile: "p.safetensors", PayloadKey: "w", Checksum: "99aa06d3014798d86001c324468d497f", ChecksumAlgorithm: "xxh3-128"}},
			TotalUncompressedNumBytes: 6, TotalCompressedNumBytes: 5, PayloadFiles: []string{"p.safetensors"},
		}
	}
	if m := good(); m.Validate() != nil {
		t.Fatalf("good manifest rejected: %v", m.Validate())
	}
	cases := map[string]func(m *delta.Manifest){
		"version 0":              func(m *delta.Manifest) { m.Version, m.BaseVersion = 0, 0 },
		"base not below version": func(m *delta.Manifest) { m.BaseVersion = 2 },
		"bad totals":             func(m *delta.Manifest) { m.TotalCompressedNumBytes = 4 },
		"size vs shape":          func(m *delta.Manifest) { m.Tensors[0].Shape = []int64{4} },
		"unknown dtype":          func(m *delta.Manifest) { m.Tensors[0].DType = "float8_e9" },
		"payload not listed":     func(m *delta.Manifest) { m.Tensors[0].PayloadFile = "q.safetensors" },
		"path in payload name":   func(m *delta.Manifest) { m.PayloadFiles[0] = "../p"; m.Tensors[0].PayloadFile = "../p" },
		"unknown checksum algo":  func(m *delta.Manifest) { m.Tensors[0].ChecksumAlgorithm = "md5" },
		"short checksum":         func(m *delta.Manifest) { m.Tensors[0].Checksum = "abc" },
		"duplicate tensor": func(m *delta.Manifest) {
			e := m.Tensors[0]
			e.PayloadKey = "w2"
			m.Tensors = append(m.Tensors, e)
			m.TotalCompressedNumBytes, m.TotalUncompressedNumBytes = 10, 12
		},
	}
	for name, mut := range cases {
		m := good()
		m.Tensors = slices.Clone(m.Tensors)
		m.PayloadFiles = slices.Clone(m.PayloadFiles)
		mut(&m)
		if err := m.Validate(); !errors.Is(err, delta.ErrManifest) {
			t.Errorf("%s: Validate = %v, want ErrManifest", name, err)
		}
	}
}

func TestEncodeConfigValidate(t *testing.T) {
	for _, mut := range []func(c *delta.EncodeConfig){
		func(c *delta.EncodeConfig) { c.Level = 0 },
		func(c *delta.EncodeConfig) { c.Workers = 0 },
		func(c *delta.EncodeConfig) { c.MaxFileSizeGB = 0 },
		func(c *delta.EncodeConfig) { c.ChecksumAlgorithm = "crc32" },
		func(c *delta.EncodeConfig) { c.Rank = -1 },
	} {
		c := delta.DefaultEncodeConfig()
		mut(&c)
		if c.Validate() == nil {
			t.Errorf("%+v validated", c)
		}
	}
}

func TestVerifyPayloads(t *testing.T) {
	f := newFixture(t, 10, 1)
	m := f.publish(1, delta.DefaultEncodeConfig())
	dir := f.st.Path(delta.DeltaDir(1))
	if err := delta.VerifyPayloads(context.Background(), m, dir); err != nil {
		t.Fatalf("a good version: %v", err)
	}
	p := filepath.Join(dir, m.PayloadFiles[0])
	good, _ := os.ReadFile(p)
	os.WriteFile(p, good[:len(good)-1], 0o644)
	if err := delta.VerifyPayloads(context.Background(), m, dir); !errors.Is(err, delta.ErrCorrupt) {
		t.Fatalf("a truncated payload: %v", err)
	}
}

// flakyPuts fails every other Put after consuming part of the reader.
type flakyPuts struct {
	store.Store
	n int
}

func (f *flakyPuts) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	f.n++
	if f.n%2 == 1 {
		io.CopyN(io.Discard, r, 100)
		return errors.New("transient")
	}
	return f.Store.Put(ctx, key, r, size)
}

func TestEncodeThroughRetryingStoreRewindsPayloads(t *testing.T) {
	f := newFixture(t, 13, 1)
	flaky := &flakyPuts{Store: f.st}
	rs, err := store.NewRetrying(flaky, store.RetryConfig{Attempts: 3}, func(context.Context, time.Duration) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	cfg := delta.DefaultEncodeConfig()
	cfg.MaxFileSizeGB = 1.0 / (1 << 20)
	m, err := delta.Encode(context.Background(), cfg, f.open(0), f.open(1), 1, rs)
	if err != nil {
		t.Fatal(err)
	}
	if rs.Retries() != int64(len(m.PayloadFiles)) || len(m.PayloadFiles) < 2 {
		t.Fatalf("%d retries for %d payload files", rs.Retries(), len(m.PayloadFiles))
	}
	dir, mut := f.working()
	if err := f.fetchApply(mut, 1); err != nil {
		t.Fatal(err)
	}
	if d := ckpttest.SameDir(dir, f.dirs[1]); d != "" {
		t.Fatal(d)
	}
}

func TestManifestReadsSkyRLSpellings(t *testing.T) {
	// An older SkyRL record: "sha256" instead of checksum/checksum_algorithm,
	// a torch-prefixed dtype.
	raw := []byte(`{"version": 4, "base_version": 3, "tensors": [{"name": "w", "dtype": "torch.float16", "shape": [2],
		"uncompressed_num_bytes": 4, "compressed_num_bytes": 3, "payload_file": "p.safetensors", "payload_key": "w",
		"sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}],
		"total_uncompressed_num_bytes": 4, "total_compressed_num_bytes": 3, "payload_files": ["p.safetensors"], "future_field": 1}`)
	m, err := delta.ParseManifest(raw)
	if err != nil {
		t.Fatal(err)
	}
	e := m.Tensors[0]
	if e.ChecksumAlgorithm != "sha256" || e.Checksum[:6] != "ba7816" {
		t.Fatalf("legacy sha256 record read as %+v", e)
	}
	if dt, _ := delta.NormalizeDType(e.DType); dt != safetensors.F16 {
		t.Fatalf("torch.float16 normalised to %s", dt)
	}
	for d, want := range map[safetensors.DType]string{safetensors.BF16: "bfloat16", safetensors.F32: "float32", safetensors.I64: "int64", safetensors.BOOL: "bool",
		safetensors.F8E4M3: "float8_e4m3fn", safetensors.F8E5M2: "float8_e5m2"} {
		if got := delta.TorchDTypeName(d); got != want {
			t.Errorf("TorchDTypeName(%s) = %s, want %s", d, got, want)
		}
		if back, err := delta.NormalizeDType(want); err != nil || back != d {
			t.Errorf("NormalizeDType(%s) = %s, %v", want, back, err)
		}
	}
}

// An FP8 checkpoint (F8_E4M3 weights, an F8_E5M2 tensor) round-trips
// through encode and apply byte for byte; the manifest spells the dtypes
// as torch does (float8_e4m3fn, float8_e5m2).
func TestFP8CheckpointRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 3))
	mk := func(names ...string) []safetensors.Tensor {
		var ts []safetensors.Tensor
		for i, n := range names {
			d := safetensors.F8E4M3
			if i == 1 {
				d = safetensors.F8E5M2
			}
			b := make([]byte, 4096)
			for j := range b {
				b[j] = byte(r.UintN(256))
			}
			ts = append(ts, safetensors.Tensor{Name: n, DType: d, Shape: []int64{64, 64}, Data: b})
		}
		return ts
	}
	v0 := mk("a", "b")
	v1 := []safetensors.Tensor{}
	for _, x := range v0 {
		y := x
		y.Data = slices.Clone(x.Data)
		y.Data[7] ^= 0x41
		v1 = append(v1, y)
	}
	root := t.TempDir()
	d0, d1 := filepath.Join(root, "v0"), filepath.Join(root, "v1")
	if err := ckpttest.Write(d0, v0, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := ckpttest.Write(d1, v1, 1<<20); err != nil {
		t.Fatal(err)
	}
	st, err := store.NewLocal(filepath.Join(root, "sync"))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := safetensors.OpenDir(d0)
	b, _ := safetensors.OpenDir(d1)
	defer a.Close()
	defer b.Close()
	m, err := delta.Encode(context.Background(), delta.DefaultEncodeConfig(), a, b, 1, st)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Tensors) != 2 || m.Tensors[0].DType != "float8_e4m3fn" || m.Tensors[1].DType != "float8_e5m2" {
		t.Fatalf("manifest tensors %+v", m.Tensors)
	}
	work := filepath.Join(root, "work")
	if err := fsutil.CopyDir(work, d0); err != nil {
		t.Fatal(err)
	}
	mut, err := delta.OpenMutable(work)
	if err != nil {
		t.Fatal(err)
	}
	defer mut.Close()
	cache := filepath.Join(root, "cache")
	man, err := delta.Fetch(context.Background(), st, 1, cache, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := delta.Apply(context.Background(), delta.DefaultApplyConfig(), man, cache, mut); err != nil {
		t.Fatal(err)
	}
	if d := ckpttest.SameDir(work, d1); d != "" {
		t.Fatalf("applied FP8 checkpoint differs: %s", d)
	}
}
