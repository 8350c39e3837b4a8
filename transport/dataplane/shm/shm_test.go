package shm

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport/dataplane"
	"github.com/asyncrl/asyncrl/transport/dataplane/tcp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func randomBytes(seed byte, n int) dataplane.Buffer {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{seed}).Read(b)
	return b
}

func newPlan(t *testing.T, id string, src dataplane.Buffer, chunk int64) *messages.TransferPlan {
	t.Helper()
	p := &messages.TransferPlan{TransferID: id, Source: "trainer-0", Destinations: []string{"engine-0"},
		Ranges: dataplane.SplitRanges("w", int64(len(src)), chunk)}
	if err := dataplane.Checksum(src, p.Ranges, dataplane.XXH3); err != nil {
		t.Fatal(err)
	}
	return p
}

// backend publishes under a per-test directory of /dev/shm so nothing leaks
// between tests (and a failing test leaves its files visible).
func backend(t *testing.T) *Backend {
	t.Helper()
	dir := "/dev/shm"
	if _, err := os.Stat(dir); err != nil {
		dir = os.TempDir()
	}
	d, err := os.MkdirTemp(dir, "asyncrl-shm-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	cfg := DefaultConfig()
	cfg.Dir = d
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Available(); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestTransfer64MiB(t *testing.T) {
	b := backend(t)
	src := randomBytes(1, 64<<20+4097)
	p := newPlan(t, "run/v7 weights", src, 8<<20)
	o, err := b.Publish(context.Background(), p, src)
	if err != nil {
		t.Fatal(err)
	}
	p.URI = o.URI()
	if !strings.HasPrefix(p.URI, "shm:///") {
		t.Fatalf("URI %q", p.URI)
	}
	dst := make(dataplane.Buffer, len(src))
	res, err := b.Fetch(context.Background(), p, dst)
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes != int64(len(src)) || !bytes.Equal(dst, src) {
		t.Fatalf("got %d bytes, equal=%v", res.Bytes, bytes.Equal(dst, src))
	}
	path, _ := ParseURI(p.URI)
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("published file still there after Close: %v", err)
	}
	if _, err := b.Fetch(context.Background(), p, dst); !errors.Is(err, dataplane.ErrUnknownTransfer) {
		t.Fatalf("fetch after close: %v, want ErrUnknownTransfer", err)
	}
}

// A non-memory source and sink (files) take the ReadAt/WriteAt paths.
func TestFileSourceAndSink(t *testing.T) {
	b := backend(t)
	src := randomBytes(2, 5<<20+3)
	dir := t.TempDir()
	sp := filepath.Join(dir, "src")
	os.WriteFile(sp, src, 0o600)
	sf, _ := os.Open(sp)
	defer sf.Close()
	df, _ := os.Create(filepath.Join(dir, "dst"))
	defer df.Close()
	p := newPlan(t, "files", src, 1<<20)
	o, err := b.Publish(context.Background(), p, sf)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	p.URI = o.URI()
	if _, err := b.Fetch(context.Background(), p, df); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(df.Name())
	if !bytes.Equal(got, src) {
		t.Fatal("file sink differs")
	}
	// file:// names any file: the source file itself, unpublished.
	p.URI = "file://" + sp
	dst := make(dataplane.Buffer, len(src))
	if _, err := b.Fetch(context.Background(), p, dst); err != nil || !bytes.Equal(dst, src) {
		t.Fatalf("file:// fetch: %v", err)
	}
}

func TestCorruptedRangeDetected(t *testing.T) {
	b := backend(t)
	src := randomBytes(3, 4<<20)
	p := newPlan(t, "corrupt", src, 1<<20)
	o, err := b.Publish(context.Background(), p, src)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	p.URI = o.URI()
	path, _ := ParseURI(p.URI)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{^src[2<<20+5]}, 2<<20+5) // a bit flip in the shared copy
	f.Close()
	_, err = b.Fetch(context.Background(), p, make(dataplane.Buffer, len(src)))
	var re *dataplane.RangeError
	if !errors.Is(err, dataplane.ErrChecksum) || !errors.As(err, &re) || re.Index != 2 {
		t.Fatalf("err %v, want ErrChecksum in range 2", err)
	}
}

func TestShortFileIsBadPlan(t *testing.T) {
	b := backend(t)
	path := filepath.Join(t.TempDir(), "short")
	os.WriteFile(path, make([]byte, 100), 0o600)
	p := &messages.TransferPlan{TransferID: "s", URI: "file://" + path, Ranges: []messages.ByteRange{{Length: 200}}}
	if _, err := b.Fetch(context.Background(), p, make(dataplane.Buffer, 200)); !errors.Is(err, dataplane.ErrBadPlan) {
		t.Fatalf("err %v, want ErrBadPlan", err)
	}
	p.URI = "tcp://127.0.0.1:1/s"
	if _, err := b.Fetch(context.Background(), p, make(dataplane.Buffer, 200)); !errors.Is(err, dataplane.ErrBadPlan) {
		t.Fatalf("tcp URI: err %v, want ErrBadPlan", err)
	}
}

func TestMissingDirFallsBackToTCP(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Dir = filepath.Join(t.TempDir(), "no-such-dir")
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Available(); !errors.Is(err, dataplane.ErrUnavailable) {
		t.Fatalf("Available: %v, want ErrUnavailable", err)
	}
	tb, err := tcp.New(tcp.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	got, skipped, err := dataplane.NewRegistry(s, tb).Pick("shm")
	if err != nil || got.Name() != "tcp" || len(skipped) != 1 || skipped[0].Name != "shm" {
		t.Fatalf("Pick: %v %v %v, want tcp after skipping shm", got, skipped, err)
	}
}

// A closed offer's file is kept (under another name: its URI stops
// resolving) and the next Publish overwrites it instead of allocating.
func TestFilesReusedAcrossPublishes(t *testing.T) {
	b := backend(t)
	src1, src2 := randomBytes(5, 3<<20), randomBytes(6, 2<<20+5)
	p1, p2 := newPlan(t, "v1", src1, 1<<20), newPlan(t, "v2", src2, 1<<20)
	o1, err := b.Publish(context.Background(), p1, src1)
	if err != nil {
		t.Fatal(err)
	}
	p1.URI = o1.URI()
	path1, _ := ParseURI(p1.URI)
	st1, err := os.Stat(path1)
	if err != nil {
		t.Fatal(err)
	}
	o1.Close()
	if _, err := b.Fetch(context.Background(), p1, make(dataplane.Buffer, len(src1))); !errors.Is(err, dataplane.ErrUnknownTransfer) {
		t.Fatalf("fetch of a closed offer: %v, want ErrUnknownTransfer", err)
	}
	o2, err := b.Publish(context.Background(), p2, src2)
	if err != nil {
		t.Fatal(err)
	}
	p2.URI = o2.URI()
	path2, _ := ParseURI(p2.URI)
	st2, err := os.Stat(path2)
	if err != nil {
		t.Fatal(err)
	}
	if path2 == path1 || !os.SameFile(st1, st2) || st2.Size() != int64(len(src2)) {
		t.Fatalf("second publish at %s (size %d) is not the first file renamed and resized", path2, st2.Size())
	}
	dst := make(dataplane.Buffer, len(src2))
	if _, err := b.Fetch(context.Background(), p2, dst); err != nil || !bytes.Equal(dst, src2) {
		t.Fatalf("fetch from the reused file: %v", err)
	}
	o2.Close()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(b.cfg.Dir, "asyncrl-dp-*"))
	if len(left) != 0 {
		t.Fatalf("files left after Close: %v", left)
	}
}
