// Package ckpt keeps a run's trainer checkpoints in a weights/store object
// store (the cluster's JetStream object store asyncrl-ckpt-<run>), so a
// trainer term that takes the lease over resumes from the weights, Adam
// moments, optimiser step and RNG state of the last durable step.
//
// Checkpoint v<g>-t<T> (global version g, written by the term with fencing
// token T) is the files of model.Trainer.SaveTrainer under that prefix,
// plus a manifest (names, sizes, SHA-256) committed last: a checkpoint
// without its manifest never completed and is not a checkpoint. The token
// is in the name so that a deposed holder still finishing a step can never
// overwrite the checkpoint its successor records for the same version.
//
// Every store call retries transient errors (store.Retrying) for a bounded
// time, RetryWithin: after a node died the bucket's stream may be electing
// a leader for seconds. A missing, incomplete or corrupt checkpoint is
// ErrCheckpoint at once, never retried.
package ckpt

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/weights/store"
)

// ErrCheckpoint wraps every reason a recorded trainer checkpoint cannot be
// restored (missing, incomplete, corrupt, of another version). The term
// that meets one fails rather than restart the policy from version 0.
var ErrCheckpoint = errors.New("ckpt: trainer checkpoint unusable")

// errRetryBound ends the retries of a store call that kept failing for
// RetryWithin; the call's last error is wrapped with it.
var errRetryBound = errors.New("ckpt: the store kept failing")

const (
	// Scheme prefixes a checkpoint location recorded in the durable
	// progress: nats-os://<bucket>/v<global version>-t<token>.
	Scheme = "nats-os://"
	// ManifestName is committed last in every checkpoint.
	ManifestName = "MANIFEST.json"
	// RetryWithin bounds how long one store call retries transient errors:
	// no try starts after it.
	RetryWithin = 30 * time.Second
)

// OpenNATS opens run runID's checkpoint bucket on nc as it is (another
// node created it, and its config is not this node's to rewrite), or
// creates it (file storage, or memory when memory is set; replicas
// replicas) when it does not exist. One attempt: callers retry it through
// a leader election. It returns the store and the root of its locations
// (New's root).
//
// The bucket is the run's plan's CheckpointBucket (the run id of the run,
// not of a term: every term shares it).
func OpenNATS(ctx context.Context, nc *nats.Conn, runID string, replicas int, memory bool) (store.Store, string, error) {
	plan, err := transport.Plan(runID)
	if err != nil {
		return nil, "", fmt.Errorf("ckpt: %w", err)
	}
	bucket := plan.CheckpointBucket
	st, err := store.OpenNATS(ctx, nc, bucket)
	if errors.Is(err, store.ErrNotFound) {
		cfg := store.DefaultNATSConfig(bucket)
		cfg.Replicas = max(replicas, 1)
		cfg.VerifyPuts = cfg.Replicas > 1 // store.NATSConfig.VerifyPuts
		if memory {
			cfg.Storage = jetstream.MemoryStorage
		}
		st, err = store.NewNATS(ctx, nc, cfg)
	}
	if err != nil {
		return nil, "", fmt.Errorf("ckpt: bucket %s: %w", bucket, err)
	}
	return st, Scheme + bucket, nil
}

// Options tunes a Store; the zero value is the production setting.
type Options struct {
	// Scratch is the local directory SaveTrainer writes to before an
	// upload (required).
	Scratch string
	// Retry paces the retries of one store call (default 200 ms doubling
	// to 2 s); RetryWithin, not Attempts, normally ends them.
	Retry store.RetryConfig
	// RetryWithin bounds the retries of one store call (default
	// RetryWithin).
	RetryWithin time.Duration
	// Sleep and Now replace the real pause and clock (tests).
	Sleep store.SleepFunc
	Now   func() time.Time
	// BeforeCommit, when set, runs in Save after a checkpoint's files are
	// uploaded and before its manifest commits it (version v): a
	// node-loss test kills a node there (cluster/node's hold points).
	BeforeCommit func(v int64)
}

// Store is a run's trainer checkpoints in an object store.
type Store struct {
	st   *store.Retrying
	root string // locations are root/<name>
	opts Options
}

// New keeps checkpoints in st, their locations under root (OpenNATS's).
func New(st store.Store, root string, opts Options) (*Store, error) {
	if st == nil || root == "" || opts.Scratch == "" {
		return nil, fmt.Errorf("ckpt: store, root %q and Options.Scratch %q are required", root, opts.Scratch)
	}
	if opts.Retry == (store.RetryConfig{}) {
		opts.Retry = store.RetryConfig{Attempts: 1 << 20, BaseDelay: 200 * time.Millisecond, MaxDelay: 2 * time.Second}
	}
	if opts.RetryWithin <= 0 {
		opts.RetryWithin = RetryWithin
	}
	if opts.Sleep == nil {
		opts.Sleep = store.ContextSleep
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Store{root: strings.TrimSuffix(root, "/"), opts: opts}
	var err error
	if s.st, err = store.NewRetrying(st, opts.Retry, s.sleep); err != nil {
		return nil, fmt.Errorf("ckpt: %w", err)
	}
	return s, nil
}

// bound marks ctx as one store call's: s.st retries its transient errors
// until RetryWithin has passed from now (a deadline of the retries, not of
// the call, which a context deadline would cut mid-transfer).
func (s *Store) bound(ctx context.Context) context.Context {
	return context.WithValue(ctx, retryDeadline{}, s.opts.Now().Add(s.opts.RetryWithin))
}

type retryDeadline struct{}

// sleep is s.st's pause between tries: none starts past the call's bound.
func (s *Store) sleep(ctx context.Context, d time.Duration) error {
	if dl, ok := ctx.Value(retryDeadline{}).(time.Time); ok && s.opts.Now().Add(d).After(dl) {
		return fmt.Errorf("%w for %s", errRetryBound, s.opts.RetryWithin)
	}
	return s.opts.Sleep(ctx, d)
}

// Retries is how many times a store call was retried so far.
func (s *Store) Retries() int64 { return s.st.Retries() }

// manifest is the manifest's JSON.
type manifest struct {
	Version int64      `json:"version"`
	Token   uint64     `json:"token"`
	Files   []fileInfo `json:"files"`
}

type fileInfo struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Name is the object prefix of global version v written by term token.
func Name(v int64, token uint64) string { return fmt.Sprintf("v%d-t%d", v, token) }

// ParseName is Name's inverse.
func ParseName(name string) (v int64, token uint64, err error) {
	vs, ts, ok := strings.Cut(strings.TrimPrefix(name, "v"), "-t")
	if !ok || !strings.HasPrefix(name, "v") {
		return 0, 0, fmt.Errorf("%q is not v<version>-t<token>", name)
	}
	if v, err = strconv.ParseInt(vs, 10, 64); err != nil || v < 0 {
		return 0, 0, fmt.Errorf("%q: bad version", name)
	}
	if token, err = strconv.ParseUint(ts, 10, 64); err != nil {
		return 0, 0, fmt.Errorf("%q: bad token", name)
	}
	return v, token, nil
}

// Location is the string recorded in ledger.Progress.Checkpoint for
// checkpoint name.
func (s *Store) Location(name string) string { return s.root + "/" + name }

// parseLocation splits a location of this store into its checkpoint name,
// version and token.
func (s *Store) parseLocation(loc string) (name string, v int64, token uint64, err error) {
	rest, ok := strings.CutPrefix(loc, s.root+"/")
	if !ok {
		return "", 0, 0, fmt.Errorf("%w: location %q is not in %s/", ErrCheckpoint, loc, s.root)
	}
	if v, token, err = ParseName(rest); err != nil {
		return "", 0, 0, fmt.Errorf("%w: location %q: %v", ErrCheckpoint, loc, err)
	}
	return rest, v, token, nil
}

// Save uploads tr's complete state (model.SaveTrainer) as global version
// v of term token, the manifest last, and returns its location.
func (s *Store) Save(ctx context.Context, tr *model.Trainer, v int64, token uint64) (string, error) {
	if err := os.MkdirAll(s.opts.Scratch, 0o755); err != nil {
		return "", fmt.Errorf("ckpt: %w", err)
	}
	dir, err := os.MkdirTemp(s.opts.Scratch, "ckpt-save-*")
	if err != nil {
		return "", fmt.Errorf("ckpt: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := tr.SaveTrainer(dir); err != nil {
		return "", fmt.Errorf("ckpt: v%d: %w", v, err)
	}
	return s.SaveDir(ctx, dir, v, token)
}

// SaveDir uploads the regular files of dir — a trainer state of any
// layout, e.g. the exec backend's child state (one rank's, or a worker
// group's shards with their manifest) — as global version v of term
// token, the manifest last, and returns its location.
func (s *Store) SaveDir(ctx context.Context, dir string, v int64, token uint64) (string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("ckpt: %w", err)
	}
	name := Name(v, token)
	man := manifest{Version: v, Token: token}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		fi, err := s.upload(ctx, path.Join(name, e.Name()), filepath.Join(dir, e.Name()))
		if err != nil {
			return "", err
		}
		man.Files = append(man.Files, fi)
	}
	js, err := json.Marshal(man)
	if err != nil {
		return "", fmt.Errorf("ckpt: %w", err)
	}
	if s.opts.BeforeCommit != nil {
		s.opts.BeforeCommit(v)
	}
	if err := s.st.Commit(s.bound(ctx), path.Join(name, ManifestName), js); err != nil {
		return "", fmt.Errorf("ckpt: %s: manifest: %w", name, err)
	}
	return s.Location(name), nil
}

// upload describes the local file src and puts it as object key (an
// *os.File seeks back for each retry).
func (s *Store) upload(ctx context.Context, key, src string) (fileInfo, error) {
	f, err := os.Open(src)
	if err != nil {
		return fileInfo{}, fmt.Errorf("ckpt: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		return fileInfo{}, fmt.Errorf("ckpt: %s: %w", src, err)
	}
	if err := s.st.Put(s.bound(ctx), key, f, n); err != nil {
		return fileInfo{}, fmt.Errorf("ckpt: put %s: %w", key, err)
	}
	return fileInfo{Name: path.Base(key), Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// Prune runs after term token saved version v: durable is the location
// the durable progress references now. It deletes what Prunable lets go:
// in steady state two checkpoints stay, the durable one and the new one,
// which becomes durable once the step's progress is saved.
func (s *Store) Prune(ctx context.Context, v int64, token uint64, durable string) error {
	durableName := ""
	if durable != "" {
		var err error
		if durableName, _, _, err = s.parseLocation(durable); err != nil {
			return err
		}
	}
	keys, err := s.st.List(s.bound(ctx), "")
	if err != nil {
		return fmt.Errorf("ckpt: prune: %w", err)
	}
	current := Name(v, token)
	for _, key := range keys {
		prefix, _, _ := strings.Cut(key, "/")
		if prefix == current || !Prunable(prefix, token, durableName) {
			continue
		}
		if err := s.st.Delete(s.bound(ctx), key); err != nil {
			return fmt.Errorf("ckpt: prune %s: %w", key, err)
		}
	}
	return nil
}

// Prunable decides whether term token may delete checkpoint name when the
// durable progress references checkpoint durable ("" if none):
//   - durable itself stays, whoever wrote it;
//   - a newer term's checkpoints stay (this holder may be deposed);
//   - an older term's go: once this term records a version they are never
//     referenced again, and above the durable version they never were
//     (their holder was fenced);
//   - this term's stay from the durable version on (saved, their progress
//     about to be recorded), and all of them while none is durable yet;
//     older ones go.
func Prunable(name string, token uint64, durable string) bool {
	v, tok, err := ParseName(name)
	if err != nil || name == durable || tok > token {
		return false
	}
	if tok < token {
		return true
	}
	dv, dtok, err := ParseName(durable)
	if err != nil || dtok != token {
		return false
	}
	return v < dv
}

// Load downloads the checkpoint at loc into dir (replacing what is there),
// checks every file against the manifest and that model.LoadTrainer
// accepts it at the location's version, and returns that version. A
// missing or corrupt checkpoint is an ErrCheckpoint at once; transient
// store errors are retried for RetryWithin, then returned naming loc.
func (s *Store) Load(ctx context.Context, loc, dir string) (int64, error) {
	v, err := s.LoadDir(ctx, loc, dir)
	if err != nil {
		return 0, err
	}
	tr, err := model.LoadTrainer(dir)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %w", ErrCheckpoint, loc, err)
	}
	if tr.Version() != v {
		return 0, fmt.Errorf("%w: %s holds a trainer at version %d", ErrCheckpoint, loc, tr.Version())
	}
	return v, nil
}

// LoadDir downloads the checkpoint at loc into dir (replacing what is
// there) and checks every file against the manifest, whatever the layout
// of the state (SaveDir's counterpart: its reader checks the content, e.g.
// the exec backend's child on Init); it returns the location's version.
func (s *Store) LoadDir(ctx context.Context, loc, dir string) (int64, error) {
	name, v, token, err := s.parseLocation(loc)
	if err != nil {
		return 0, err
	}
	man, err := s.manifest(ctx, loc, name, v, token)
	if err != nil {
		return 0, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return 0, fmt.Errorf("ckpt: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, fmt.Errorf("ckpt: %w", err)
	}
	for _, fi := range man.Files {
		if fi.Name != filepath.Base(fi.Name) || fi.Name == "." || fi.Name == ".." || fi.Name == ManifestName {
			return 0, fmt.Errorf("%w: %s: manifest names file %q", ErrCheckpoint, loc, fi.Name)
		}
		if err := s.download(ctx, loc, path.Join(name, fi.Name), filepath.Join(dir, fi.Name), fi); err != nil {
			return 0, err
		}
	}
	return v, nil
}

// manifest reads and checks checkpoint name's manifest (at loc, of
// version v and token).
func (s *Store) manifest(ctx context.Context, loc, name string, v int64, token uint64) (manifest, error) {
	var man manifest
	js, err := store.ReadAll(s.bound(ctx), s.st, path.Join(name, ManifestName))
	if errors.Is(err, store.ErrNotFound) {
		return man, fmt.Errorf("%w: %s has no manifest (never completed, or deleted)", ErrCheckpoint, loc)
	}
	if err != nil {
		return man, fmt.Errorf("ckpt: %s: manifest: %w", loc, err)
	}
	if err := json.Unmarshal(js, &man); err != nil {
		return man, fmt.Errorf("%w: %s: manifest: %v", ErrCheckpoint, loc, err)
	}
	if man.Version != v || man.Token != token || len(man.Files) == 0 {
		return man, fmt.Errorf("%w: %s: manifest says version %d token %d with %d files", ErrCheckpoint, loc, man.Version, man.Token, len(man.Files))
	}
	return man, nil
}

// download fetches object key into the file dst and checks it against fi.
// A read that fails midway is not retried: the term fails and the next
// one tries again.
func (s *Store) download(ctx context.Context, loc, key, dst string, fi fileInfo) error {
	rc, err := s.st.Get(s.bound(ctx), key)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %s: object %s missing", ErrCheckpoint, loc, key)
	}
	if err != nil {
		return fmt.Errorf("ckpt: %s: %w", loc, err)
	}
	defer rc.Close()
	f, err := os.Create(dst)
	if err != nil {
		return fmt.Errorf("ckpt: %w", err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), rc)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, store.ErrCorrupt) {
		return fmt.Errorf("%w: %s: object %s: %v", ErrCheckpoint, loc, key, err)
	}
	if err != nil {
		return fmt.Errorf("ckpt: %s: object %s: %w", loc, key, err)
	}
	if n != fi.Size || hex.EncodeToString(h.Sum(nil)) != fi.SHA256 {
		return fmt.Errorf("%w: %s: object %s is %d bytes with another SHA-256 than the manifest's %d bytes", ErrCheckpoint, loc, key, n, fi.Size)
	}
	return nil
}
