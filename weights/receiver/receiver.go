package receiver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/internal/fsutil"
	"github.com/asyncrl/asyncrl/weights/delta"
	"github.com/asyncrl/asyncrl/weights/store"
)

// Loader makes an engine serve the checkpoint in dir at version. The
// built-in engine fits through LoaderFunc(eng.LoadWeights).
type Loader interface {
	Load(dir string, version int64) error
}

// LoaderFunc adapts a function to Loader.
type LoaderFunc func(dir string, version int64) error

// Load implements Loader.
func (f LoaderFunc) Load(dir string, version int64) error { return f(dir, version) }

// Sentinel errors.
var (
	// ErrVersionDecrease: the target is below the local version; versions
	// served by an engine only increase.
	ErrVersionDecrease = errors.New("receiver: target version below the local version")
	// ErrDirty: the local copy is half-applied (write_in_progress) and must
	// be reset before it can be loaded.
	ErrDirty = errors.New("receiver: weights are half-applied")
)

// Names of the files the receiver keeps, as SkyRL's receiver names them,
// so the two serialise on the same lock when they share a root.
const (
	WeightsDirName = "weights"
	SyncDirName    = ".skyrl_weight_sync"
	StateFileName  = "state.json"
	LockFileName   = "writer.lock"
	// CacheDirName (under Root) holds fetched versions, delta-{v:08d}/ and
	// full-{v:08d}/.
	CacheDirName = "deltas"
)

// Config configures a Receiver.
type Config struct {
	// Root is the local directory holding weights/ and .skyrl_weight_sync/.
	Root string
	// BaseModelPath is the version-0 checkpoint directory the local copy is
	// (re)initialised from. Required.
	BaseModelPath string
	// Workers bounds parallel downloads and tensor patching (default
	// min(4, GOMAXPROCS)).
	Workers int
	// UseFull lets a reset start from the newest full checkpoint at or
	// below the target instead of the base when downloading it moves fewer
	// bytes than replaying the deltas it covers (default true).
	UseFull bool
	// LockPoll is how often a busy lock is retried (default 10ms).
	LockPoll time.Duration
	// Logger receives progress and repair notices (default zerolog.Nop()).
	Logger zerolog.Logger
	// Registerer receives the asyncrl_weights_receiver_* metrics (nil: none).
	Registerer prometheus.Registerer
}

// DefaultConfig returns a config for root and base with the defaults.
func DefaultConfig(root, base string) Config {
	return Config{Root: root, BaseModelPath: base, Workers: min(4, runtime.GOMAXPROCS(0)), UseFull: true, LockPoll: 10 * time.Millisecond, Logger: zerolog.Nop()}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Root == "":
		return errors.New("receiver: Config.Root is required")
	case c.BaseModelPath == "":
		return errors.New("receiver: Config.BaseModelPath is required (the version-0 checkpoint)")
	case c.Workers < 1:
		return fmt.Errorf("receiver: Config.Workers %d: want ≥ 1", c.Workers)
	case c.LockPoll <= 0:
		return fmt.Errorf("receiver: Config.LockPoll %v: want > 0", c.LockPoll)
	}
	return nil
}

// State is .skyrl_weight_sync/state.json.
type State struct {
	// Version the weights/ copy holds (valid only when !WriteInProgress).
	Version int64 `json:"version"`
	// WriteInProgress: weights/ is being (or was left half-) patched.
	WriteInProgress bool `json:"write_in_progress"`
	// TargetVersion of the Apply in progress; null when none is.
	TargetVersion *int64 `json:"target_version"`
	// BaseModelPath the copy was initialised from.
	BaseModelPath string `json:"base_model_path"`
}

// Receiver brings a local checkpoint copy to a target version.
type Receiver struct {
	cfg Config
	st  store.Store
	met *metrics
}

// New returns a receiver reading versions from st.
func New(cfg Config, st store.Store) (*Receiver, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(cfg.Root, SyncDirName), 0o755); err != nil {
		return nil, fmt.Errorf("receiver: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(cfg.Root, CacheDirName), 0o755); err != nil {
		return nil, fmt.Errorf("receiver: %w", err)
	}
	met, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("receiver: metrics: %w", err)
	}
	return &Receiver{cfg: cfg, st: st, met: met}, nil
}

// WeightsDir is the mutable checkpoint copy an engine loads.
func (r *Receiver) WeightsDir() string { return filepath.Join(r.cfg.Root, WeightsDirName) }

// DeltaDir is where Fetch caches delta version v (a SkyRL delta
// directory: manifest and zstd files), until Prune removes it.
func (r *Receiver) DeltaDir(v int64) string { return r.cacheDir(v) }

func (r *Receiver) syncDir() string { return filepath.Join(r.cfg.Root, SyncDirName) }

func (r *Receiver) cacheDir(v int64) string {
	return filepath.Join(r.cfg.Root, CacheDirName, delta.DeltaDir(v))
}

// State reads state.json; ok is false when there is none yet.
func (r *Receiver) State() (s State, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(r.syncDir(), StateFileName))
	if errors.Is(err, os.ErrNotExist) {
		return State{}, false, nil
	}
	if err != nil {
		return State{}, false, fmt.Errorf("receiver: %w", err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return State{}, false, fmt.Errorf("receiver: %s: %w", StateFileName, err)
	}
	return s, true, nil
}

func (r *Receiver) saveState(s State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	ls, err := store.NewLocal(r.syncDir())
	if err != nil {
		return err
	}
	if err := ls.Commit(context.Background(), StateFileName, append(b, '\n')); err != nil {
		return fmt.Errorf("receiver: save state: %w", err)
	}
	return nil
}

// lock takes the exclusive flock, polling so ctx can end the wait.
func (r *Receiver) lock(ctx context.Context) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(r.syncDir(), LockFileName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("receiver: lock: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("receiver: lock: %w", err)
		}
		t := time.NewTimer(r.cfg.LockPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			f.Close()
			return nil, fmt.Errorf("receiver: waiting for the lock: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// Fetch downloads the delta versions after the local version up to target
// into the cache (all of 1..target when the copy needs a reset). Run it
// while the engine still serves.
func (r *Receiver) Fetch(ctx context.Context, target int64) error {
	unlock, err := r.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	s, ok, err := r.State()
	if err != nil {
		return err
	}
	from := s.Version
	if r.needsReset(s, ok) {
		if from, err = r.startFor(ctx, target); err != nil {
			return err
		}
		if from > 0 {
			if _, err := r.fetchFull(ctx, from); err != nil {
				return err
			}
		}
	}
	for v := from + 1; v <= target; v++ {
		if _, err := r.fetch(ctx, v); err != nil {
			return err
		}
	}
	return nil
}

func (r *Receiver) fetch(ctx context.Context, v int64) (*delta.Manifest, error) {
	dir := r.cacheDir(v)
	if m, err := delta.ReadManifestDir(dir, v); err == nil {
		return m, nil // a complete fetch is cached
	}
	return delta.Fetch(ctx, r.st, v, dir, r.cfg.Workers)
}

// Apply brings weights/ to target and returns the version it holds. See
// the package doc for the protocol and its failure handling.
func (r *Receiver) Apply(ctx context.Context, target int64) (int64, error) {
	unlock, err := r.lock(ctx)
	if err != nil {
		return 0, err
	}
	defer unlock()
	s, ok, err := r.State()
	if err != nil {
		return 0, err
	}
	if r.needsReset(s, ok) {
		if s, err = r.resetFor(ctx, target, s, ok); err != nil {
			return 0, err
		}
	}
	if target < s.Version {
		return s.Version, fmt.Errorf("%w: have %d, target %d", ErrVersionDecrease, s.Version, target)
	}
	if target == s.Version {
		return s.Version, nil
	}
	mut, err := delta.OpenMutable(r.WeightsDir())
	if err != nil {
		return s.Version, err
	}
	defer mut.Close()
	acfg := delta.ApplyConfig{Workers: r.cfg.Workers}
	for v := s.Version + 1; v <= target; v++ {
		if err := r.applyVersion(ctx, acfg, mut, &s, v, &target); err != nil {
			return s.Version, err
		}
	}
	return s.Version, nil
}

// resetFor resets weights/ to the start target needs, warning about the
// state it replaces when there was one (ok).
func (r *Receiver) resetFor(ctx context.Context, target int64, s State, ok bool) (State, error) {
	start, err := r.startFor(ctx, target)
	if err != nil {
		return s, err
	}
	if ok {
		r.cfg.Logger.Warn().Int64("version", s.Version).Bool("write_in_progress", s.WriteInProgress).
			Str("base_model_path", s.BaseModelPath).Int64("reset_to", start).Msg("weight sync: resetting weights/")
	}
	return r.reset(ctx, start)
}

// applyVersion fetches version v, checks it chains on s, and applies it to
// mut, saving s as write_in_progress before and as version v after.
func (r *Receiver) applyVersion(ctx context.Context, acfg delta.ApplyConfig, mut *delta.Mutable, s *State, v int64, target *int64) error {
	m, err := r.fetch(ctx, v)
	if err != nil {
		return err
	}
	if m.Version != v || m.BaseVersion != s.Version {
		return fmt.Errorf("%w: version %d has base_version %d, but weights/ holds %d", delta.ErrChain, m.Version, m.BaseVersion, s.Version)
	}
	s.TargetVersion, s.WriteInProgress = target, true
	if err := r.saveState(*s); err != nil {
		return err
	}
	res, err := delta.Apply(ctx, acfg, m, r.cacheDir(v), mut)
	if err != nil {
		if errors.Is(err, delta.ErrChecksum) || errors.Is(err, delta.ErrCorrupt) {
			// The cached copy is bad (or the store's is): drop it so the
			// next try refetches; weights/ stays marked dirty.
			_ = os.RemoveAll(r.cacheDir(v))
			r.met.rejected.Inc()
			r.cfg.Logger.Error().Err(err).Int64("version", v).Msg("weight sync: rejected version; the next sync resets from the base")
		}
		return fmt.Errorf("receiver: version %d rejected, weights/ left write_in_progress: %w", v, err)
	}
	if len(res.Skipped) > 0 {
		// Once per version, not per tensor: the names are the same
		// every version, so the first ten say enough.
		r.met.skipped.Add(float64(len(res.Skipped)))
		r.cfg.Logger.Warn().Int64("version", v).Int("skipped", len(res.Skipped)).
			Strs("first", res.Skipped[:min(10, len(res.Skipped))]).
			Msg("weight sync: skipped delta tensors absent from the local checkpoint")
	}
	s.Version, s.WriteInProgress = v, false
	r.met.applied.Inc()
	r.met.appliedBytes.Add(float64(m.TotalCompressedNumBytes))
	r.met.version.Set(float64(v))
	if v == *target {
		s.TargetVersion = nil
	}
	return r.saveState(*s)
}

func (r *Receiver) needsReset(s State, ok bool) bool {
	_, statErr := os.Stat(r.WeightsDir())
	return !ok || s.WriteInProgress || s.BaseModelPath != r.cfg.BaseModelPath || statErr != nil
}

// startFor picks where a reset starts: 0 (the local base) or a full
// checkpoint f ≤ target, when downloading it moves fewer bytes than the
// deltas 1..f it replaces (or those deltas were pruned). The base is
// local, so it costs only its deltas.
func (r *Receiver) startFor(ctx context.Context, target int64) (int64, error) {
	if !r.cfg.UseFull || target < 1 {
		return 0, nil
	}
	fulls, err := delta.SnapshotVersions(ctx, r.st, delta.KindFull)
	if err != nil {
		return 0, err
	}
	var f int64
	for _, v := range fulls {
		if v <= target {
			f = v
		}
	}
	if f < 1 {
		return 0, nil
	}
	fm, err := delta.ReadSnapshotManifest(ctx, r.st, delta.KindFull, f)
	if err != nil {
		return 0, err
	}
	var deltaBytes int64
	for v := int64(1); v <= f && deltaBytes <= fm.TotalNumBytes; v++ {
		m, err := delta.ReadManifest(ctx, r.st, v)
		if errors.Is(err, delta.ErrNoVersion) {
			return f, nil // the deltas below f were pruned (delta.Prune): the full checkpoint is the way
		}
		if err != nil {
			return 0, err
		}
		deltaBytes += m.TotalCompressedNumBytes
	}
	if fm.TotalNumBytes < deltaBytes {
		return f, nil
	}
	return 0, nil
}

func (r *Receiver) fullCacheDir(v int64) string {
	return filepath.Join(r.cfg.Root, CacheDirName, delta.SnapshotDir(delta.KindFull, v))
}

// fetchFull downloads full checkpoint v into the cache (complete when the
// directory exists: it is renamed into place after verification).
func (r *Receiver) fetchFull(ctx context.Context, v int64) (string, error) {
	dst := r.fullCacheDir(v)
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dst), ".tmp-full-*")
	if err != nil {
		return "", fmt.Errorf("receiver: %w", err)
	}
	defer os.RemoveAll(tmp)
	if _, err := delta.FetchSnapshot(ctx, r.st, delta.KindFull, v, tmp, r.cfg.Workers); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return "", fmt.Errorf("receiver: %w", err)
	}
	return dst, nil
}

// reset replaces weights/ with a copy of the base checkpoint (start 0) or
// of full checkpoint start.
func (r *Receiver) reset(ctx context.Context, start int64) (State, error) {
	s := State{Version: start, WriteInProgress: true, BaseModelPath: r.cfg.BaseModelPath}
	if err := r.saveState(s); err != nil {
		return s, err
	}
	src := r.cfg.BaseModelPath
	if start > 0 {
		var err error
		if src, err = r.fetchFull(ctx, start); err != nil {
			return s, err
		}
	}
	tmp, err := os.MkdirTemp(r.cfg.Root, ".weights-reset-*")
	if err != nil {
		return s, fmt.Errorf("receiver: reset: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := fsutil.CopyDir(tmp, src); err != nil {
		return s, fmt.Errorf("receiver: reset from %s: %w", src, err)
	}
	if err := os.RemoveAll(r.WeightsDir()); err != nil {
		return s, fmt.Errorf("receiver: reset: %w", err)
	}
	if err := os.Rename(tmp, r.WeightsDir()); err != nil {
		return s, fmt.Errorf("receiver: reset: %w", err)
	}
	s.WriteInProgress = false
	r.met.resets.Inc()
	r.met.version.Set(float64(start))
	return s, r.saveState(s)
}

// Load hands weights/ to the engine at the local version. It refuses a
// half-applied copy.
func (r *Receiver) Load(l Loader) (int64, error) {
	s, ok, err := r.State()
	if err != nil {
		return 0, err
	}
	if !ok || s.WriteInProgress {
		return s.Version, fmt.Errorf("%w: run Apply first", ErrDirty)
	}
	if err := l.Load(r.WeightsDir(), s.Version); err != nil {
		return s.Version, fmt.Errorf("receiver: load version %d: %w", s.Version, err)
	}
	return s.Version, nil
}

// Sync fetches, applies and loads target: the whole update of one engine.
func (r *Receiver) Sync(ctx context.Context, target int64, l Loader) (int64, error) {
	if err := r.Fetch(ctx, target); err != nil {
		return 0, err
	}
	if v, err := r.Apply(ctx, target); err != nil {
		return v, err
	}
	return r.Load(l)
}

// Prune deletes cached deltas at or below version (they are needed again
// only after a reset, which refetches).
func (r *Receiver) Prune(version int64) error {
	ents, err := os.ReadDir(filepath.Join(r.cfg.Root, CacheDirName))
	if err != nil {
		return fmt.Errorf("receiver: %w", err)
	}
	for _, e := range ents {
		if v, ok := delta.ParseDeltaDir(e.Name()); ok && v <= version {
			if err := os.RemoveAll(filepath.Join(r.cfg.Root, CacheDirName, e.Name())); err != nil {
				return fmt.Errorf("receiver: %w", err)
			}
		}
	}
	return nil
}
