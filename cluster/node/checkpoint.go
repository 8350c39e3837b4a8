package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors/trainer"
	"github.com/asyncrl/asyncrl/cluster/ledger"
	"github.com/asyncrl/asyncrl/policy"
	"github.com/asyncrl/asyncrl/weights/safetensors"
)

// ErrCheckpoint wraps every reason a recorded trainer checkpoint cannot be
// restored (missing, incomplete, corrupt, of another version). The term
// that meets one fails rather than restart the policy from version 0.
var ErrCheckpoint = errors.New("node: trainer checkpoint unusable")

const (
	// ckptScheme prefixes a checkpoint location recorded in the durable
	// progress: nats-os://<bucket>/v<global version>-t<token>.
	ckptScheme = "nats-os://"
	// ckptManifest is uploaded last: a checkpoint without it never
	// completed (its holder died mid-upload) and is not a checkpoint.
	ckptManifest = "MANIFEST.json"
	// ckptRetry bounds the retries of transient JetStream errors: after a
	// node died, the bucket's stream may be electing a leader for seconds.
	ckptRetry = 30 * time.Second
)

// ckptBucket is the object store bucket of a run's trainer checkpoints
// (the run id of the run, not of a term: every term shares it).
func ckptBucket(runID string) string { return "asyncrl-ckpt-" + runID }

// ckptStore keeps a run's trainer checkpoints in a JetStream object store:
// checkpoint v<g>-t<T> (global version g, written by the term with fencing
// token T) is the files of policy.Trainer.SaveTrainer under that prefix,
// plus a manifest (names, sizes, SHA-256) uploaded last. The token is in
// the name so that a deposed holder still finishing a step can never
// overwrite the checkpoint its successor records for the same version.
type ckptStore struct {
	obs     jetstream.ObjectStore
	bucket  string
	scratch string // where SaveTrainer writes before the upload
}

// ckptManifestFile is the manifest's JSON.
type ckptManifestFile struct {
	Version int64          `json:"version"`
	Token   uint64         `json:"token"`
	Files   []ckptFileInfo `json:"files"`
}

type ckptFileInfo struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// openCkptStore creates or opens run runID's checkpoint bucket (file
// storage, or memory when memory is set), retrying transient errors.
// scratch is a local directory for the files of a save.
func openCkptStore(ctx context.Context, nc *nats.Conn, runID string, replicas int, memory bool, scratch string) (*ckptStore, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("node: checkpoints: %w", err)
	}
	storage := jetstream.FileStorage
	if memory {
		storage = jetstream.MemoryStorage
	}
	s := &ckptStore{bucket: ckptBucket(runID), scratch: scratch}
	// Open first: another node created the bucket, and its config is not
	// this node's to rewrite.
	err = retry(ctx, ckptRetry, func() (err error) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if s.obs, err = js.ObjectStore(cctx, s.bucket); !errors.Is(err, jetstream.ErrBucketNotFound) {
			return err
		}
		s.obs, err = js.CreateObjectStore(cctx, jetstream.ObjectStoreConfig{Bucket: s.bucket,
			Description: "asyncrl trainer checkpoints of run " + runID, Storage: storage, Replicas: max(replicas, 1)})
		return err // ErrBucketExists (a node created it meanwhile) opens it on the retry
	})
	if err != nil {
		return nil, fmt.Errorf("node: checkpoints: bucket %s: %w", s.bucket, err)
	}
	return s, nil
}

// ckptName is the object prefix of global version v written by term token.
func ckptName(v int64, token uint64) string { return fmt.Sprintf("v%d-t%d", v, token) }

// parseCkptName is ckptName's inverse.
func parseCkptName(name string) (v int64, token uint64, err error) {
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

// location is the string recorded in ledger.Progress.Checkpoint.
func (s *ckptStore) location(name string) string { return ckptScheme + s.bucket + "/" + name }

// parseLocation splits a location of this store into its checkpoint name,
// version and token.
func (s *ckptStore) parseLocation(loc string) (name string, v int64, token uint64, err error) {
	rest, ok := strings.CutPrefix(loc, ckptScheme+s.bucket+"/")
	if !ok {
		return "", 0, 0, fmt.Errorf("%w: location %q is not in %s%s/", ErrCheckpoint, loc, ckptScheme, s.bucket)
	}
	if v, token, err = parseCkptName(rest); err != nil {
		return "", 0, 0, fmt.Errorf("%w: location %q: %v", ErrCheckpoint, loc, err)
	}
	return rest, v, token, nil
}

// save uploads tr's complete state (policy.SaveTrainer) as global version
// v of term token and returns its location.
func (s *ckptStore) save(ctx context.Context, tr *policy.Trainer, v int64, token uint64) (string, error) {
	if err := os.MkdirAll(s.scratch, 0o755); err != nil {
		return "", fmt.Errorf("node: checkpoint: %w", err)
	}
	dir, err := os.MkdirTemp(s.scratch, "ckpt-save-*")
	if err != nil {
		return "", fmt.Errorf("node: checkpoint: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := tr.SaveTrainer(dir); err != nil {
		return "", fmt.Errorf("node: checkpoint v%d: %w", v, err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("node: checkpoint: %w", err)
	}
	name := ckptName(v, token)
	man := ckptManifestFile{Version: v, Token: token}
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
		return "", fmt.Errorf("node: checkpoint: %w", err)
	}
	if err := retry(ctx, ckptRetry, func() error {
		_, err := s.obs.PutBytes(ctx, path.Join(name, ckptManifest), js)
		return err
	}); err != nil {
		return "", fmt.Errorf("node: checkpoint %s: manifest: %w", name, err)
	}
	return s.location(name), nil
}

// upload puts the local file src as object key and describes it.
func (s *ckptStore) upload(ctx context.Context, key, src string) (ckptFileInfo, error) {
	var fi ckptFileInfo
	err := retry(ctx, ckptRetry, func() error {
		f, err := os.Open(src)
		if err != nil {
			return backoff.Permanent(err)
		}
		defer f.Close()
		h := sha256.New()
		info, err := s.obs.Put(ctx, jetstream.ObjectMeta{Name: key}, io.TeeReader(f, h))
		if err != nil {
			return err
		}
		fi = ckptFileInfo{Name: path.Base(key), Size: int64(info.Size), SHA256: hex.EncodeToString(h.Sum(nil))}
		return nil
	})
	if err != nil {
		return fi, fmt.Errorf("node: checkpoint: put %s: %w", key, err)
	}
	return fi, nil
}

// prune runs after term token saved version v: durable is the location
// the durable progress references now. It deletes what ckptPrunable lets
// go: in steady state two checkpoints stay, the durable one and the new
// one, which becomes durable once the step's progress is saved.
func (s *ckptStore) prune(ctx context.Context, v int64, token uint64, durable string) error {
	durableName := ""
	if durable != "" {
		var err error
		if durableName, _, _, err = s.parseLocation(durable); err != nil {
			return err
		}
	}
	var infos []*jetstream.ObjectInfo
	if err := retry(ctx, ckptRetry, func() (err error) {
		infos, err = s.obs.List(ctx)
		if errors.Is(err, jetstream.ErrNoObjectsFound) {
			infos, err = nil, nil
		}
		return err
	}); err != nil {
		return fmt.Errorf("node: checkpoint prune: %w", err)
	}
	current := ckptName(v, token)
	for _, in := range infos {
		prefix, _, _ := strings.Cut(in.Name, "/")
		if in.Deleted || prefix == current || !ckptPrunable(prefix, token, durableName) {
			continue
		}
		key := in.Name
		if err := retry(ctx, ckptRetry, func() error {
			err := s.obs.Delete(ctx, key)
			if errors.Is(err, jetstream.ErrObjectNotFound) {
				return nil
			}
			return err
		}); err != nil {
			return fmt.Errorf("node: checkpoint prune %s: %w", key, err)
		}
	}
	return nil
}

// ckptPrunable decides whether term token may delete checkpoint name when
// the durable progress references checkpoint durable ("" if none):
//   - durable itself stays, whoever wrote it;
//   - a newer term's checkpoints stay (this holder may be deposed);
//   - an older term's go: once this term records a version they are never
//     referenced again, and above the durable version they never were
//     (their holder was fenced);
//   - this term's stay from the durable version on (saved, their progress
//     about to be recorded), and all of them while none is durable yet;
//     older ones go.
func ckptPrunable(name string, token uint64, durable string) bool {
	v, tok, err := parseCkptName(name)
	if err != nil || name == durable || tok > token {
		return false
	}
	if tok < token {
		return true
	}
	dv, dtok, err := parseCkptName(durable)
	if err != nil || dtok != token {
		return false
	}
	return v < dv
}

// load downloads the checkpoint at loc into dir (replacing what is there),
// checks every file against the manifest and that policy.LoadTrainer
// accepts it, and returns its global version. A missing or corrupt
// checkpoint is an ErrCheckpoint at once (not retried); transient
// JetStream errors are retried.
func (s *ckptStore) load(ctx context.Context, loc, dir string) (int64, error) {
	name, v, token, err := s.parseLocation(loc)
	if err != nil {
		return 0, err
	}
	var js []byte
	if err := retry(ctx, ckptRetry, func() (err error) {
		js, err = s.obs.GetBytes(ctx, path.Join(name, ckptManifest))
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return backoff.Permanent(fmt.Errorf("%w: %s has no manifest (never completed, or deleted)", ErrCheckpoint, loc))
		}
		return err
	}); err != nil {
		return 0, ckptErr(loc, err)
	}
	var man ckptManifestFile
	if err := json.Unmarshal(js, &man); err != nil {
		return 0, fmt.Errorf("%w: %s: manifest: %v", ErrCheckpoint, loc, err)
	}
	if man.Version != v || man.Token != token || len(man.Files) == 0 {
		return 0, fmt.Errorf("%w: %s: manifest says version %d token %d with %d files", ErrCheckpoint, loc, man.Version, man.Token, len(man.Files))
	}
	if err := os.RemoveAll(dir); err != nil {
		return 0, fmt.Errorf("node: checkpoint: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, fmt.Errorf("node: checkpoint: %w", err)
	}
	for _, fi := range man.Files {
		if fi.Name != filepath.Base(fi.Name) || fi.Name == "." || fi.Name == ".." {
			return 0, fmt.Errorf("%w: %s: manifest names file %q", ErrCheckpoint, loc, fi.Name)
		}
		if err := s.download(ctx, loc, path.Join(name, fi.Name), filepath.Join(dir, fi.Name), fi); err != nil {
			return 0, err
		}
	}
	tr, err := policy.LoadTrainer(dir)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %w", ErrCheckpoint, loc, err)
	}
	if tr.Version() != v {
		return 0, fmt.Errorf("%w: %s holds a trainer at version %d", ErrCheckpoint, loc, tr.Version())
	}
	return v, nil
}

// download fetches object key into the file dst and checks it against fi.
func (s *ckptStore) download(ctx context.Context, loc, key, dst string, fi ckptFileInfo) error {
	err := retry(ctx, ckptRetry, func() error {
		res, err := s.obs.Get(ctx, key)
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return backoff.Permanent(fmt.Errorf("%w: %s: object %s missing", ErrCheckpoint, loc, key))
		}
		if err != nil {
			return err
		}
		defer res.Close()
		f, err := os.Create(dst)
		if err != nil {
			return backoff.Permanent(err)
		}
		h := sha256.New()
		n, err := io.Copy(io.MultiWriter(f, h), res)
		if cerr := f.Close(); err == nil && cerr != nil {
			return backoff.Permanent(cerr)
		}
		if errors.Is(err, jetstream.ErrDigestMismatch) {
			return backoff.Permanent(fmt.Errorf("%w: %s: object %s: %v", ErrCheckpoint, loc, key, err))
		}
		if err != nil {
			return err
		}
		if n != fi.Size || hex.EncodeToString(h.Sum(nil)) != fi.SHA256 {
			return backoff.Permanent(fmt.Errorf("%w: %s: object %s is %d bytes with another SHA-256 than the manifest's %d bytes", ErrCheckpoint, loc, key, n, fi.Size))
		}
		return nil
	})
	if err != nil {
		return ckptErr(loc, err)
	}
	return nil
}

// ckptErr adds the location to an error of load that lacks it.
func ckptErr(loc string, err error) error {
	if errors.Is(err, ErrCheckpoint) {
		return err // it names loc already
	}
	return fmt.Errorf("node: checkpoint %s: %w", loc, err)
}

// loadTrainerWithConfig restores the trainer checkpoint in dir
// (policy.LoadTrainer) under this run's trainer config: the master
// weights, Adam moments, optimiser step and RNG state come from the
// checkpoint; every hyperparameter (and Workers, sized for this node's
// CPUs) from tcfg. policy has no setter for a restored trainer's config,
// so the checkpoint's trainer_config metadata is replaced in a temporary
// copy, and the result is checked. dir itself is left as it is.
func loadTrainerWithConfig(dir string, tcfg policy.TrainerConfig) (*policy.Trainer, error) {
	f, err := safetensors.Open(filepath.Join(dir, policy.TrainerFileName))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", policy.ErrCheckpoint, err)
	}
	defer f.Close()
	var ts []safetensors.Tensor
	for _, name := range f.Names() {
		data, info, err := f.ReadTensor(name)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", policy.ErrCheckpoint, err)
		}
		ts = append(ts, safetensors.Tensor{Name: name, DType: info.DType, Shape: info.Shape, Data: data})
	}
	js, err := json.Marshal(tcfg)
	if err != nil {
		return nil, err
	}
	md := maps.Clone(f.Metadata)
	if md == nil {
		md = map[string]string{}
	}
	md["trainer_config"] = string(js)
	tmp, err := os.MkdirTemp("", "asyncrl-resume-*")
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := safetensors.WriteFile(filepath.Join(tmp, policy.TrainerFileName), ts, md); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	cfgJS, err := os.ReadFile(filepath.Join(dir, policy.ConfigFileName))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", policy.ErrCheckpoint, err)
	}
	if err := os.WriteFile(filepath.Join(tmp, policy.ConfigFileName), cfgJS, 0o644); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	tr, err := policy.LoadTrainer(tmp)
	if err != nil {
		return nil, err
	}
	if got := tr.Config(); got != tcfg {
		return nil, fmt.Errorf("%w: restored trainer config %+v, want this run's %+v (has the checkpoint format changed?)", policy.ErrCheckpoint, got, tcfg)
	}
	return tr, nil
}

// afterStepPublisher runs Options.AfterStep once each version is
// published. It runs in the trainer actor's goroutine, between the publish
// and the step's record, so tr holds exactly version v (this run's local
// version); an error fails the step.
type afterStepPublisher struct {
	trainer.Publisher
	tr    *policy.Trainer
	after func(ctx context.Context, tr *policy.Trainer, version int64) error
}

// Publish implements trainer.Publisher.
func (p afterStepPublisher) Publish(ctx context.Context, m *policy.Model, v int64) error {
	if err := p.Publisher.Publish(ctx, m, v); err != nil {
		return err
	}
	if err := p.after(ctx, p.tr, v); err != nil {
		return fmt.Errorf("node: after version %d: %w", v, err)
	}
	return nil
}

// termCkpt is one trainer term's checkpointing (Agent.train): the restore
// at its start, an upload after every step (AfterStep) and the location
// each step's durable progress records. AfterStep runs in the trainer's
// goroutine, the progress saves in the term's, hence the lock.
type termCkpt struct {
	store *ckptStore
	node  string
	log   zerolog.Logger
	base  int64 // the global version of this term's version 0
	token uint64

	mu      sync.Mutex
	at      map[int64]string // local version → location, until recorded
	durable string           // the location the durable progress references
}

// startTermCkpt opens the run's checkpoint bucket for the term that
// claimed progress p with token. When p records a checkpoint it is
// downloaded into resumeDir and verified; its global version must be
// p.Version. Progress past version 0 without a checkpoint is refused: the
// term would silently restart the policy from the seed's weights.
func startTermCkpt(ctx context.Context, a *Agent, p ledger.Progress, token uint64, resumeDir string) (*termCkpt, bool, error) {
	scratch := filepath.Dir(resumeDir)
	st, err := openCkptStore(ctx, a.bus.Conn(), a.cfg.Run.Run.ID, a.cfg.Replicas, a.cfg.InMemoryBus, scratch)
	if err != nil {
		return nil, false, err
	}
	c := &termCkpt{store: st, node: a.cfg.Name, log: a.log, base: p.Version, token: token, at: map[int64]string{}, durable: p.Checkpoint}
	if p.Checkpoint == "" {
		if p.Version > 0 {
			return nil, false, fmt.Errorf("%w: the durable progress (step %d version %d) records no checkpoint; refusing to restart the policy from the seed's weights",
				ErrCheckpoint, p.Step, p.Version)
		}
		return c, false, nil
	}
	v, err := st.load(ctx, p.Checkpoint, resumeDir)
	if err != nil {
		return nil, false, err
	}
	if v != p.Version {
		return nil, false, fmt.Errorf("%w: %s is version %d but the durable progress is at version %d", ErrCheckpoint, p.Checkpoint, v, p.Version)
	}
	return c, true, nil
}

// afterStep is Options.AfterStep: upload local version v as global
// version base+v.
func (c *termCkpt) afterStep(ctx context.Context, tr *policy.Trainer, v int64) error {
	c.mu.Lock()
	durable := c.durable
	c.mu.Unlock()
	loc, err := c.store.save(ctx, tr, c.base+v, c.token)
	if err != nil {
		return err
	}
	// A failed prune costs space, not safety: the step goes on.
	if err := c.store.prune(ctx, c.base+v, c.token, durable); err != nil {
		c.log.Warn().Err(err).Msg("checkpoint prune failed; the next save tries again")
	}
	c.mu.Lock()
	c.at[v] = loc
	c.mu.Unlock()
	if h := ckptSavedHook; h != nil {
		h(c.node, c.base+v, tr)
	}
	return nil
}

// ckptSavedHook, set by tests before any agent starts, sees every trainer
// a term checkpointed: the node, the global version, the trainer (which
// holds exactly that version during the call).
var ckptSavedHook func(node string, version int64, tr *policy.Trainer)

// location is where local version v's checkpoint lives; AfterStep for v
// returned before v's step was recorded, so a missing one is a bug.
func (c *termCkpt) location(v int64) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	loc, ok := c.at[v]
	if !ok {
		return "", fmt.Errorf("%w: no checkpoint saved for version %d", ErrCheckpoint, c.base+v)
	}
	return loc, nil
}

// recorded notes that the durable progress now references local version
// v's checkpoint at loc (the next save prunes against it).
func (c *termCkpt) recorded(v int64, loc string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.at, v)
	c.durable = loc
}
