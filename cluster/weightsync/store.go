package weightsync

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/asyncrl/asyncrl/actors/publisher/tracker"
	"github.com/asyncrl/asyncrl/config"
	pol "github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
	"github.com/asyncrl/asyncrl/weights/delta"
	"github.com/asyncrl/asyncrl/weights/quantdir"
	"github.com/asyncrl/asyncrl/weights/receiver"
	"github.com/asyncrl/asyncrl/weights/safetensors"
	"github.com/asyncrl/asyncrl/weights/store"
)

// Layout names the run's weight directories.
type Layout struct {
	SyncDir   string // local store root: <publisher.sync_dir or data_dir/weights>/<run.id>
	Publisher string // base/ and staging/
	Receivers string // one receiver root per engine
}

// LayoutFor is cfg's Layout under run.data_dir.
func LayoutFor(cfg config.Config) Layout {
	sync := cfg.Publisher.SyncDir
	if sync == "" {
		sync = filepath.Join(cfg.Run.DataDir, "weights")
	}
	return Layout{
		SyncDir:   filepath.Join(sync, cfg.Run.ID),
		Publisher: filepath.Join(cfg.Run.DataDir, "publisher", cfg.Run.ID),
		Receivers: filepath.Join(cfg.Run.DataDir, "receivers", cfg.Run.ID),
	}
}

// SaveBase writes version 0 (the engines' initial weights; quantised as
// publisher.quantize says, so every delta is over quantised bytes) and
// returns its directory.
func SaveBase(cfg config.Config, serving *pol.Model) (string, error) {
	l := LayoutFor(cfg)
	if err := os.RemoveAll(l.Publisher); err != nil {
		return "", fmt.Errorf("node: publisher dir: %w", err)
	}
	base := filepath.Join(l.Publisher, "base")
	s, err := SchemeFor(cfg)
	if err != nil {
		return "", err
	}
	if _, _, err := saveServing(serving, base, s); err != nil {
		return "", fmt.Errorf("node: base checkpoint: %w", err)
	}
	return base, nil
}

// SaveBaseDir is SaveBase for a run on a Hugging Face checkpoint in dir:
// the base every receiver replays from is dir itself (read, never
// written), or with publisher.quantize its quantised copy under the
// publisher's directory (weights/quantdir), so version 0 is served as
// every later version is.
func SaveBaseDir(cfg config.Config, dir string) (string, error) {
	l := LayoutFor(cfg)
	if err := os.RemoveAll(l.Publisher); err != nil {
		return "", fmt.Errorf("node: publisher dir: %w", err)
	}
	s, err := SchemeFor(cfg)
	if err != nil || s == nil {
		return dir, err
	}
	base := filepath.Join(l.Publisher, "base")
	if _, err := quantdir.Quantize(dir, base, s); err != nil {
		return "", fmt.Errorf("node: base checkpoint: %w", err)
	}
	return base, nil
}

// StoreOptions are how a node opens publisher.store nats.
type StoreOptions struct {
	// Conn is the bus's connection.
	Conn *nats.Conn
	// InMemory keeps the bucket in memory (tests).
	InMemory bool
	// Clustered: a cluster term's bucket, with Replicas copies, created
	// through Retry (JetStream's meta leader may be electing) and read
	// through a store that rides out a leader election.
	Clustered bool
	Replicas  int
	// Retry runs f until it succeeds or gives up (nil: once with the
	// caller's context), each attempt with the context it passes.
	Retry func(f func(context.Context) error) error
}

// OpenStore opens publisher.store for this run, emptied: a run starts from
// version 0 (its seed), so versions an earlier run with the same run.id
// left behind would not chain.
func OpenStore(ctx context.Context, cfg config.Config, o StoreOptions) (store.Store, error) {
	st, err := openStore(ctx, cfg, o)
	if err != nil {
		return nil, fmt.Errorf("node: publisher.store %s: %w", cfg.Publisher.Store, err)
	}
	keys, err := st.List(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("node: publisher.store %s: %w", cfg.Publisher.Store, err)
	}
	for _, k := range keys {
		if err := st.Delete(ctx, k); err != nil {
			return nil, fmt.Errorf("node: publisher.store %s: %w", cfg.Publisher.Store, err)
		}
	}
	return st, nil
}

func openStore(ctx context.Context, cfg config.Config, o StoreOptions) (store.Store, error) {
	switch cfg.Publisher.Store {
	case config.StoreLocal:
		dir := LayoutFor(cfg).SyncDir
		if err := os.RemoveAll(dir); err != nil {
			return nil, fmt.Errorf("publisher.sync_dir: %w", err)
		}
		return store.NewLocal(dir)
	case config.StoreNATS:
		return openNATS(ctx, cfg, o)
	case config.StoreS3:
		return store.NewS3(ctx, s3Config(cfg))
	default:
		return nil, fmt.Errorf("unknown publisher.store %q", cfg.Publisher.Store)
	}
}

func openNATS(ctx context.Context, cfg config.Config, o StoreOptions) (store.Store, error) {
	plan, err := transport.Plan(cfg.Run.ID)
	if err != nil {
		return nil, fmt.Errorf("run.id: %w", err)
	}
	nc := store.DefaultNATSConfig(plan.WeightsBucket)
	if o.InMemory {
		nc.Storage = jetstream.MemoryStorage
	}
	if o.Clustered {
		nc.Replicas = max(1, o.Replicas)
		// A Put across a leader election can store misordered chunks
		// (store.NATSConfig.VerifyPuts): read each back.
		nc.VerifyPuts = nc.Replicas > 1
	}
	retry := o.Retry
	if retry == nil {
		retry = func(f func(context.Context) error) error { return f(ctx) }
	}
	// A term's bucket is created through JetStream's meta leader, which
	// a clustered bus elects anew when its server died.
	var st store.Store
	if err := retry(func(ctx context.Context) (err error) {
		st, err = store.NewNATS(ctx, o.Conn, nc)
		if natsbus.IsNoPlacement(err) && nc.Replicas > 1 {
			// Too few servers up for every copy: the term's bucket takes
			// what they can hold rather than the term not starting.
			nc.Replicas--
		}
		return err
	}); err != nil {
		return nil, err
	}
	if !o.Clustered {
		return st, nil
	}
	// A node of the cluster whose server led the bucket may die mid-run:
	// ride out the leader election instead of failing the term.
	return store.NewRetrying(st, store.RetryConfig{Attempts: 8, BaseDelay: 200 * time.Millisecond, MaxDelay: 5 * time.Second}, nil)
}

func s3Config(cfg config.Config) store.S3Config {
	sc := store.DefaultS3Config()
	sc.Bucket, sc.Prefix, sc.CreateBucket = cfg.Publisher.S3Bucket, cfg.Run.ID+"/", true
	sc.AccessKey, sc.SecretKey = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	sc.Endpoint, sc.Secure = "s3.amazonaws.com", true
	if e := cfg.Publisher.S3Endpoint; e != "" {
		if u, perr := url.Parse(e); perr == nil && u.Host != "" {
			sc.Endpoint, sc.Secure = u.Host, u.Scheme == "https"
		} else {
			sc.Endpoint = strings.TrimSuffix(e, "/")
		}
	}
	return sc
}

// storeMode is publisher.transport store: each version is encoded as a
// SkyRL delta against the previous one into the run's store, and every
// engine's receiver replays the deltas up to its target.
type storeMode struct {
	st        store.Store
	pub       *delta.Publisher
	receivers string // one receiver root per engine
	reg       prometheus.Registerer

	prevDir   string // the serving checkpoint of pub.Version()
	prevOwned bool   // prevDir is ours to delete (not the base, not a remote trainer's)

	// fulls are the full checkpoints published; pruned the version below
	// which the store was emptied; pruning is true while a prune runs.
	mu      sync.Mutex
	fulls   []int64
	pruned  int64
	pruning bool
	pruneWG sync.WaitGroup
}

// Store is the store mode of a Sync (publisher.transport store): versions
// are encoded with pcfg into st, starting from the base checkpoint in
// baseDir; each engine's receiver lives under receivers (emptied here)
// and registers its metrics on reg.
func Store(ctx context.Context, st store.Store, pcfg delta.PublisherConfig, baseDir, receivers string, reg prometheus.Registerer) (Mode, error) {
	dp, err := delta.NewPublisher(ctx, st, pcfg)
	if err != nil {
		return nil, fmt.Errorf("node: publisher: %w", err)
	}
	if err := os.RemoveAll(receivers); err != nil {
		return nil, fmt.Errorf("node: receivers dir: %w", err)
	}
	return &storeMode{st: st, pub: dp, receivers: receivers, reg: reg, prevDir: baseDir}, nil
}

// StoreOf is the store a Sync in store mode publishes to (nil in data
// plane mode).
func StoreOf(w *Sync) store.Store {
	if s, ok := w.mode.(*storeMode); ok {
		return s.st
	}
	return nil
}

func (s *storeMode) current() int64                     { return s.pub.Version() }
func (s *storeMode) collectors() []prometheus.Collector { return nil }
func (s *storeMode) close()                             { s.pruneWG.Wait() }

func (s *storeMode) source(w *Sync, d *Driven) (Source, error) {
	rc := receiver.DefaultConfig(filepath.Join(s.receivers, d.Name), w.c.BaseDir)
	rc.Logger = w.log.With().Str("engine", d.Name).Logger()
	rc.Registerer = prometheus.WrapRegistererWith(prometheus.Labels{"engine": d.Name}, s.reg)
	rcv, err := receiver.New(rc, s.st)
	if err != nil {
		return nil, fmt.Errorf("node: receiver %s: %w", d.Name, err)
	}
	return ReceiverSource(rcv), nil
}

func (s *storeMode) publishVersion(ctx context.Context, w *Sync, dir string, version int64, owned bool, t0 time.Time) error {
	info, full, err := s.write(ctx, w, dir, version, owned, t0)
	if err != nil {
		return err
	}
	if full {
		defer s.prune(w, info.Version) // once the version is routable
	}
	return w.announce(ctx, info)
}

// write encodes dir into the store as version: its delta, and its full
// checkpoint when one is due and its write succeeded (full: the store is
// pruned below it once it is routable).
func (s *storeMode) write(ctx context.Context, w *Sync, dir string, version int64, owned bool, t0 time.Time) (info tracker.VersionInfo, full bool, err error) {
	out, err := s.encode(ctx, dir)
	switch {
	case err != nil && out.Version != version:
		return info, false, fmt.Errorf("node: publisher: version %d: %w", version, err)
	case err != nil:
		// The delta is written (Current is version), only the optional
		// full checkpoint is not: the version goes out as a delta, so
		// the next delta is encoded against it and a retry is not
		// needed (a retry writes nothing: Sync.Retry).
		w.log.Warn().Err(err).Int64("version", version).Msg("publisher: full checkpoint not written; the version is published as a delta")
	}
	if s.prevOwned {
		_ = os.RemoveAll(s.prevDir)
	}
	s.prevDir, s.prevOwned = dir, owned
	w.observePublish(time.Since(t0))
	w.deltaBytes.Add(float64(out.Manifest.TotalCompressedNumBytes))
	info = tracker.VersionInfo{Version: out.Version, DeltaBytes: out.Manifest.TotalCompressedNumBytes}
	if full = err == nil && out.Full != nil; full {
		info.FullBytes = out.Full.TotalNumBytes
	}
	return info, full, nil
}

func (s *storeMode) encode(ctx context.Context, dir string) (delta.Published, error) {
	base, err := safetensors.OpenDir(s.prevDir)
	if err != nil {
		return delta.Published{}, err
	}
	defer base.Close()
	next, err := safetensors.OpenDir(dir)
	if err != nil {
		return delta.Published{}, err
	}
	defer next.Close()
	return s.pub.Publish(ctx, base, next, dir)
}

// prune, after full checkpoint full was published, deletes from the store
// every version below the newest full checkpoint that every engine has
// already passed: nobody replays those deltas any more, and a receiver
// that resets starts from the full one (delta.Prune). Without it a
// multi-day run's store grows by one delta per step. It runs in the
// background, one at a time.
func (s *storeMode) prune(w *Sync, full int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fulls = append(s.fulls, full)
	if s.pruning {
		return
	}
	floor := int64(-1)
	for _, st := range w.shell.Engines() {
		if st.Serving >= 0 && (floor < 0 || st.Serving < floor) {
			floor = st.Serving
		}
	}
	before := int64(0)
	for _, f := range s.fulls {
		if f <= floor {
			before = max(before, f)
		}
	}
	if before <= s.pruned {
		return
	}
	s.pruning = true
	s.pruneWG.Go(func() {
		n, err := delta.Prune(w.ctx, s.st, before)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.pruning = false
		w.prunedN.Add(float64(n))
		if err != nil {
			w.log.Warn().Err(err).Int64("before", before).Msg("publisher: pruning old versions failed; retried at the next full checkpoint")
			return
		}
		s.pruned = before
		s.fulls = slices.DeleteFunc(s.fulls, func(f int64) bool { return f < before })
	})
}
