package store_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/asyncrl/asyncrl/transport/natsbus"
	"github.com/asyncrl/asyncrl/weights/store"
	"github.com/asyncrl/asyncrl/weights/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// nats.go v1.55 jetstream: every object-store Put starts
		// resetPendingAcksOnReconnect and cleans up when it returns; when the
		// cleanup wins the race, the goroutine reads the status channel as
		// nil and blocks forever. One per unlucky Put, in the library.
		goleak.IgnoreAnyFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
		// net/http keeps idle client connections' goroutines until the
		// transport is garbage; they are not ours to stop.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

func TestLocalConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := store.NewLocal(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestLocalSkipsTempFilesAndUsesPlainPaths(t *testing.T) {
	dir := t.TempDir()
	s, err := store.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.PutBytes(context.Background(), s, "delta-00000001/manifest.json", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	// The layout on disk is the key's path: a SkyRL receiver reads it as is.
	if b, err := os.ReadFile(filepath.Join(dir, "delta-00000001", "manifest.json")); err != nil || string(b) != "{}" {
		t.Fatalf("file at the key's path: %q, %v", b, err)
	}
	// A crashed writer's temporary file is never listed.
	if err := os.WriteFile(filepath.Join(dir, "delta-00000001", ".tmp-x-123"), []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	keys, err := s.List(context.Background(), "")
	if err != nil || len(keys) != 1 || keys[0] != "delta-00000001/manifest.json" {
		t.Fatalf("List = %v, %v", keys, err)
	}
}

func newS3(t *testing.T, bucket string) store.Store {
	faker := gofakes3.New(s3mem.New())
	srv := httptest.NewServer(faker.Server()) // 127.0.0.1, random port
	t.Cleanup(srv.Close)
	cfg := store.DefaultS3Config()
	cfg.Endpoint = strings.TrimPrefix(srv.URL, "http://")
	cfg.Bucket = bucket
	cfg.CreateBucket = true
	cfg.AccessKey, cfg.SecretKey = "test", "testsecret"
	cfg.Region = "us-east-1"
	s, err := store.NewS3(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestS3Conformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return newS3(t, "weights") })
}

func TestS3PrefixIsolatesRuns(t *testing.T) {
	faker := gofakes3.New(s3mem.New())
	srv := httptest.NewServer(faker.Server())
	defer srv.Close()
	mk := func(prefix string) store.Store {
		cfg := store.DefaultS3Config()
		cfg.Endpoint, cfg.Bucket, cfg.CreateBucket, cfg.Prefix = strings.TrimPrefix(srv.URL, "http://"), "bkt", true, prefix
		cfg.AccessKey, cfg.SecretKey, cfg.Region = "k", "s", "us-east-1"
		s, err := store.NewS3(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := mk("run-a/"), mk("run-b/")
	ctx := context.Background()
	if err := store.PutBytes(ctx, a, "delta-00000001/manifest.json", []byte("a")); err != nil {
		t.Fatal(err)
	}
	if keys, err := b.List(ctx, ""); err != nil || len(keys) != 0 {
		t.Fatalf("run-b sees %v, %v", keys, err)
	}
	if keys, err := a.List(ctx, ""); err != nil || len(keys) != 1 || keys[0] != "delta-00000001/manifest.json" {
		t.Fatalf("run-a lists %v, %v (prefix must be stripped)", keys, err)
	}
}

func TestS3ConfigValidate(t *testing.T) {
	for _, c := range []store.S3Config{{}, {Endpoint: "http://x:1", Bucket: "b"}, {Endpoint: "x:1"}, {Endpoint: "x:1", Bucket: "b", Prefix: "p"}} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v validated", c)
		}
	}
}

func TestNATSConformance(t *testing.T) {
	ctx := context.Background()
	bus, err := natsbus.Connect(ctx, natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bus.Close() })
	n := 0
	storetest.Run(t, func(t *testing.T) store.Store {
		n++
		cfg := store.DefaultNATSConfig("weights-" + string(rune('a'+n)))
		cfg.Storage = jetstream.MemoryStorage
		s, err := store.NewNATS(ctx, bus.Conn(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

var errFlaky = errors.New("transient")

func TestRetryingBacksOffAndRewinds(t *testing.T) {
	base, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fs := &failingStore{Store: base}
	fs.failures.Store(3)
	var slept []time.Duration
	sleep := func(_ context.Context, d time.Duration) error { slept = append(slept, d); return nil }
	r, err := store.NewRetrying(fs, store.RetryConfig{Attempts: 5, BaseDelay: 10 * time.Millisecond, MaxDelay: 25 * time.Millisecond}, sleep)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The failing store consumes part of the reader before failing, so the
	// retry must rewind it.
	if err := store.PutBytes(ctx, r, "k", []byte("hello world")); err != nil {
		t.Fatalf("put with 3 transient failures and 5 attempts: %v", err)
	}
	if b, err := store.ReadAll(ctx, base, "k"); err != nil || string(b) != "hello world" {
		t.Fatalf("stored %q, %v", b, err)
	}
	want := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 25 * time.Millisecond}
	if len(slept) != len(want) {
		t.Fatalf("slept %v, want %v", slept, want)
	}
	for i := range want {
		if slept[i] != want[i] {
			t.Fatalf("slept %v, want %v", slept, want)
		}
	}
	if r.Retries() != 3 {
		t.Fatalf("Retries = %d, want 3", r.Retries())
	}
	// Not-found is final: no retry.
	slept = nil
	if _, err := r.Get(ctx, "missing"); !errors.Is(err, store.ErrNotFound) || len(slept) != 0 {
		t.Fatalf("Get(missing) = %v after %d sleeps; want ErrNotFound at once", err, len(slept))
	}
	// A call's own timeout while the caller's context lives (the NATS
	// client's default while a stream elects a leader) is retried; once the
	// caller's context has ended it is final.
	fs.err = fmt.Errorf("nats: put: %w", context.DeadlineExceeded)
	fs.failures.Store(2)
	slept = nil
	if err := r.Delete(ctx, "k"); err != nil || len(slept) != 2 {
		t.Fatalf("Delete after 2 call timeouts = %v after %d sleeps; want success after 2 retries", err, len(slept))
	}
	fs.failures.Store(2)
	slept = nil
	dead, cancel := context.WithCancel(ctx)
	cancel()
	if err := r.Delete(dead, "k"); !errors.Is(err, context.DeadlineExceeded) || len(slept) != 0 {
		t.Fatalf("Delete with an ended context = %v after %d sleeps; want the error at once", err, len(slept))
	}
	fs.err = nil
	// Too many failures: the error comes back, wrapped.
	fs.failures.Store(10)
	if err := r.Delete(ctx, "k"); !errors.Is(err, errFlaky) {
		t.Fatalf("Delete with persistent failures = %v", err)
	}
}

// failingStore fails its next `failures` calls, after consuming part of a
// Put's reader.
type failingStore struct {
	store.Store
	failures atomic.Int64
	err      error // returned by a failing call (nil: errFlaky)
}

func (f *failingStore) fail() bool { return f.failures.Add(-1) >= 0 }

func (f *failingStore) failure() error {
	if f.err != nil {
		return f.err
	}
	return errFlaky
}

func (f *failingStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if f.fail() {
		_, _ = r.Read(make([]byte, 3))
		return f.failure()
	}
	return f.Store.Put(ctx, key, r, size)
}

func (f *failingStore) Delete(ctx context.Context, key string) error {
	if f.fail() {
		return f.failure()
	}
	return f.Store.Delete(ctx, key)
}

func TestOpenLocations(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, loc := range []string{dir, "file://" + dir} {
		s, c, err := store.Open(ctx, loc)
		if err != nil {
			t.Fatalf("Open(%s): %v", loc, err)
		}
		if l, ok := s.(*store.Local); !ok || l.Root() != dir {
			t.Fatalf("Open(%s) = %T", loc, s)
		}
		c.Close()
	}

	faker := gofakes3.New(s3mem.New())
	srv := httptest.NewServer(faker.Server())
	defer srv.Close()
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	loc := "s3://bkt/run/7?create=true&region=us-east-1&endpoint=" + strings.TrimPrefix(srv.URL, "http://")
	s, c, err := store.Open(ctx, loc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := store.PutBytes(ctx, s, "delta-00000001/manifest.json", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	// The prefix from the URL path is applied: a store without it sees the
	// full key.
	raw, c2, err := store.Open(ctx, "s3://bkt?region=us-east-1&endpoint="+strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if keys, err := raw.List(ctx, ""); err != nil || len(keys) != 1 || keys[0] != "run/7/delta-00000001/manifest.json" {
		t.Fatalf("bucket holds %v, %v", keys, err)
	}

	bus, err := natsbus.Connect(ctx, natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	ns, c3, err := store.Open(ctx, bus.ClientURL()+"/weights?storage=memory")
	if err != nil {
		t.Fatal(err)
	}
	if err := store.PutBytes(ctx, ns, "a/b", []byte("x")); err != nil {
		t.Fatal(err)
	}
	c3.Close()

	for _, bad := range []string{"", "ftp://x/y", "s3://bkt?secure=maybe&endpoint=x:1", "file://remote/path"} {
		if _, _, err := store.Open(ctx, bad); err == nil {
			t.Errorf("Open(%q) succeeded", bad)
		}
	}
}

// OpenNATS reads a bucket another process created (memory storage here)
// without changing its configuration; a missing bucket is ErrNotFound.
func TestOpenNATSReadsExistingBucket(t *testing.T) {
	ctx := context.Background()
	bus, err := natsbus.Connect(ctx, natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bus.Close() })
	cfg := store.DefaultNATSConfig("open-existing")
	cfg.Storage = jetstream.MemoryStorage
	w, err := store.NewNATS(ctx, bus.Conn(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.PutBytes(ctx, w, "base/model.safetensors", []byte("weights")); err != nil {
		t.Fatal(err)
	}
	r, err := store.OpenNATS(ctx, bus.Conn(), "open-existing")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := store.ReadAll(ctx, r, "base/model.safetensors"); err != nil || string(b) != "weights" {
		t.Fatalf("read %q, %v", b, err)
	}
	js, _ := jetstream.New(bus.Conn())
	obs, err := js.ObjectStore(ctx, "open-existing")
	if err != nil {
		t.Fatal(err)
	}
	st, err := obs.Status(ctx)
	if err != nil || st.BackingStore() != "JetStream" || st.Replicas() != 1 {
		t.Fatalf("status %v, %v", st, err)
	}
	if si, ok := st.(*jetstream.ObjectBucketStatus); ok && si.StreamInfo().Config.Storage != jetstream.MemoryStorage {
		t.Errorf("opening changed the bucket's storage to %v", si.StreamInfo().Config.Storage)
	}
	if _, err := store.OpenNATS(ctx, bus.Conn(), "no-such-bucket"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("missing bucket: %v, want ErrNotFound", err)
	}
}
