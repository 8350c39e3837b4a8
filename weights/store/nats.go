package store

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSConfig configures a JetStream Object Store.
type NATSConfig struct {
	// Bucket is the object store bucket name (letters, digits, - and _).
	Bucket string
	// Storage is jetstream.FileStorage (default, survives a restart) or
	// jetstream.MemoryStorage.
	Storage jetstream.StorageType
	// Replicas is the number of JetStream replicas (default 1).
	Replicas int
	// ChunkSize is the size of the messages an object is cut into (default
	// 128 KiB, the client's default); it must stay below the server's
	// max_payload.
	ChunkSize uint32
	// IdleTimeout ends a Get whose reader got no byte for this long
	// (default 30s): the client reads an object through a consumer, and
	// one that sat on a server that died can stop delivering without an
	// error, leaving the reader blocked until its context's deadline.
	IdleTimeout time.Duration
	// OpenTimeout ends a Get whose object has not started to arrive after
	// this long (default 10s): the client asks the server for a consumer
	// first, and a request that reached a server as it died (JetStream's
	// meta leader, say) is never answered; the call fails with
	// ErrStalled, which a Retrying store tries again.
	OpenTimeout time.Duration
	// VerifyPuts reads every object back after its Put and fails the Put
	// (ErrCorrupt, which a Retrying store tries again) when the stored
	// chunks do not match the digest. The NATS client (nats.go v1.55
	// jetstream/object.go Put, publish.go's async retry on no responders)
	// re-sends a chunk that met no stream leader from the one buffer Put
	// reuses for every chunk, after the chunks that followed it: a Put
	// across a leader election of a replicated bucket can succeed and
	// leave an object no reader can get ("nats: received a corrupt
	// object, digests do not match"; the node-loss e2e, 1 run in 3).
	// It costs one read of each object; openers of replicated buckets
	// turn it on.
	VerifyPuts bool
	// ListTimeout bounds a List (default 15s). The client lists through a
	// watcher that first reads the bucket's last metadata message; when
	// that read fails (a bucket just created on a cluster whose replicas
	// do not answer direct gets yet), the watcher's "initial values done"
	// never comes for an empty bucket and List waits for its context's
	// end (nats.go v1.55 jetstream/object.go Watch): a term's start hung
	// there for its whole life (issue 37). A List that times out while
	// its context lives fails with a deadline, which a Retrying store
	// tries again.
	ListTimeout time.Duration
	// afterPut, when set (tests), runs between the Put and its check.
	afterPut func(ctx context.Context, info *jetstream.ObjectInfo)
}

// DefaultNATSConfig returns a file-backed, single-replica bucket config.
func DefaultNATSConfig(bucket string) NATSConfig {
	return NATSConfig{Bucket: bucket, Storage: jetstream.FileStorage, Replicas: 1, ChunkSize: 128 << 10,
		IdleTimeout: 30 * time.Second, OpenTimeout: 10 * time.Second, ListTimeout: 15 * time.Second}
}

// Validate names the first bad field.
func (c NATSConfig) Validate() error {
	if c.Bucket == "" {
		return errors.New("store: nats: Bucket is required")
	}
	for _, r := range c.Bucket {
		if !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return fmt.Errorf("store: nats: Bucket %q: only letters, digits, - and _ are allowed", c.Bucket)
		}
	}
	if c.Replicas < 0 {
		return fmt.Errorf("store: nats: Replicas %d must be ≥ 1 (0 means 1)", c.Replicas)
	}
	if c.ListTimeout < 0 {
		return fmt.Errorf("store: nats: ListTimeout %s must be ≥ 0 (0 means 15s)", c.ListTimeout)
	}
	return nil
}

// NATS is a Store in a JetStream Object Store bucket. An object becomes
// visible only when its last chunk and its metadata are stored, and a
// replaced object's old chunks are purged after the new metadata is in, so
// Put is atomic; JetStream acknowledges a publish only once it is stored,
// so Commit is a Put.
type NATS struct {
	os  jetstream.ObjectStore
	js  jetstream.JetStream
	cfg NATSConfig
}

var _ Store = (*NATS)(nil)

// NewNATS opens (creating if needed) the bucket on the connection nc.
func NewNATS(ctx context.Context, nc *nats.Conn, cfg NATSConfig) (*NATS, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("store: nats: %w", err)
	}
	obs, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      cfg.Bucket,
		Description: "asyncrl weight versions",
		Storage:     cfg.Storage,
		Replicas:    cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("store: nats: bucket %s: %w", cfg.Bucket, err)
	}
	return &NATS{os: obs, js: js, cfg: cfg}, nil
}

// OpenNATS opens an existing bucket without changing its configuration
// (a reader on another node: NewNATS would try to update the storage and
// replicas to its own config). A missing bucket is ErrNotFound.
func OpenNATS(ctx context.Context, nc *nats.Conn, bucket string) (*NATS, error) {
	cfg := DefaultNATSConfig(bucket)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("store: nats: %w", err)
	}
	obs, err := js.ObjectStore(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("%w: bucket %s", ErrNotFound, bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("store: nats: bucket %s: %w", bucket, err)
	}
	return &NATS{os: obs, js: js, cfg: cfg}, nil
}

// Put implements Store.
func (n *NATS) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	meta := jetstream.ObjectMeta{Name: key}
	if n.cfg.ChunkSize > 0 {
		meta.Opts = &jetstream.ObjectMetaOptions{ChunkSize: n.cfg.ChunkSize}
	}
	info, err := n.os.Put(ctx, meta, r)
	if err != nil {
		return fmt.Errorf("store: nats: put %s: %w", key, err)
	}
	if size >= 0 && int64(info.Size) != size {
		return fmt.Errorf("store: nats: put %s: stored %d bytes, declared %d", key, info.Size, size)
	}
	if n.cfg.afterPut != nil {
		n.cfg.afterPut(ctx, info)
	}
	if n.cfg.VerifyPuts {
		return n.verify(ctx, info)
	}
	return nil
}

// verifyCall bounds each request of a Put's check.
const verifyCall = 10 * time.Second

// verify reads the chunks Put stored back from the stream's leader (an
// ordered consumer: a Get starts from the metadata, which a replica that
// lags behind the leader does not have yet) and checks their count, size
// and digest against info.
func (n *NATS) verify(ctx context.Context, info *jetstream.ObjectInfo) error {
	fail := func(err error) error { return fmt.Errorf("store: nats: put %s: reading it back: %w", info.Name, err) }
	if info.Chunks == 0 {
		return nil
	}
	// A plain ephemeral consumer, not an ordered one: an ordered
	// consumer whose creation fails (the stream's leader just died)
	// retries for ever, whatever the context (nats.go v1.55
	// jetstream/ordered.go reset; the trainer's publish hung there in the
	// node-loss e2e). Each call here is bounded; a Retrying store tries
	// the Put again.
	stream := "OBJ_" + n.cfg.Bucket
	cctx, cancel := context.WithTimeout(ctx, verifyCall)
	cons, err := n.js.CreateConsumer(cctx, stream, jetstream.ConsumerConfig{
		FilterSubject: "$O." + n.cfg.Bucket + ".C." + info.NUID, AckPolicy: jetstream.AckNonePolicy,
		MemoryStorage: true, Replicas: 1, InactiveThreshold: time.Minute})
	cancel()
	if err != nil {
		return fail(err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), verifyCall)
		_ = n.js.DeleteConsumer(dctx, stream, cons.CachedInfo().Name)
		cancel()
	}()
	h, chunks, size := sha256.New(), uint32(0), uint64(0)
	// Fetch waits for as many as it asks for: ask for the chunks still
	// due (one when they are all in but more are pending: a stray).
	for done := false; !done && chunks <= info.Chunks; {
		due := max(1, int(info.Chunks)-int(chunks))
		batch, err := cons.Fetch(min(due, 256), jetstream.FetchMaxWait(verifyCall))
		if err != nil {
			return fail(err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			chunks++
			size += uint64(len(m.Data()))
			h.Write(m.Data())
			if md, err := m.Metadata(); err != nil || md.NumPending == 0 {
				done = true
			}
		}
		if err := batch.Error(); err != nil {
			return fail(err)
		}
		if got == 0 && !done {
			return fail(fmt.Errorf("no chunk arrived: %w", ErrStalled))
		}
	}
	digest := "SHA-256=" + base64.URLEncoding.EncodeToString(h.Sum(nil))
	if chunks != info.Chunks || size != info.Size || digest != info.Digest {
		return fail(fmt.Errorf("%w: %d chunks, %d bytes, %s stored; the metadata says %d, %d, %s",
			ErrCorrupt, chunks, size, digest, info.Chunks, info.Size, info.Digest))
	}
	return nil
}

// Commit implements Store.
func (n *NATS) Commit(ctx context.Context, key string, data []byte) error {
	return n.Put(ctx, key, bytes.NewReader(data), int64(len(data)))
}

// Get implements Store.
func (n *NATS) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	def := DefaultNATSConfig("")
	idle, open := cmp.Or(n.cfg.IdleTimeout, def.IdleTimeout), cmp.Or(n.cfg.OpenTimeout, def.OpenTimeout)
	// The object's chunks arrive under gctx for as long as it is read, so
	// the open bound cancels it only if Get has not returned by then.
	gctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(open, cancel)
	res, err := n.os.Get(gctx, key)
	if !timer.Stop() && ctx.Err() == nil {
		cancel()
		if err == nil {
			_ = res.Close()
		}
		return nil, fmt.Errorf("store: nats: get %s: no answer for %s: %w", key, open, ErrStalled)
	}
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		cancel()
		return nil, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("store: nats: get %s: %w", key, err)
	}
	r := newIdleReader(res, idle, "store: nats: get "+key)
	r.onClose = cancel
	return r, nil
}

// ErrStalled: a read got no data within its idle timeout.
var ErrStalled = errors.New("store: read stalled")

// idleReader closes rc when no Read returned data for idle, so a blocked
// Read ends with ErrStalled instead of waiting for its context.
type idleReader struct {
	rc      io.ReadCloser
	idle    time.Duration
	what    string
	timer   *time.Timer
	stalled atomic.Bool
	onClose func() // may be nil
}

func newIdleReader(rc io.ReadCloser, idle time.Duration, what string) *idleReader {
	r := &idleReader{rc: rc, idle: idle, what: what}
	r.timer = time.AfterFunc(idle, func() {
		r.stalled.Store(true)
		_ = rc.Close()
	})
	return r
}

func (r *idleReader) Read(p []byte) (int, error) {
	n, err := r.rc.Read(p)
	if n > 0 {
		r.timer.Reset(r.idle)
	}
	if err != nil && err != io.EOF && r.stalled.Load() {
		err = fmt.Errorf("%s: no data for %s: %w", r.what, r.idle, ErrStalled)
	}
	if errors.Is(err, jetstream.ErrDigestMismatch) {
		err = fmt.Errorf("%s: %w: %w", r.what, ErrCorrupt, err)
	}
	return n, err
}

func (r *idleReader) Close() error {
	r.timer.Stop()
	err := r.rc.Close()
	if r.onClose != nil {
		r.onClose()
	}
	return err
}

// List implements Store.
func (n *NATS) List(ctx context.Context, prefix string) ([]string, error) {
	if err := validatePrefix(prefix); err != nil {
		return nil, err
	}
	if n.emptyByLeader(ctx) {
		return nil, nil
	}
	lctx, cancel := context.WithTimeout(ctx, cmp.Or(n.cfg.ListTimeout, DefaultNATSConfig("").ListTimeout))
	defer cancel()
	infos, err := n.os.List(lctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: nats: list %q: %w", prefix, err)
	}
	var keys []string
	for _, in := range infos {
		if !in.Deleted && strings.HasPrefix(in.Name, prefix) {
			keys = append(keys, in.Name)
		}
	}
	slices.Sort(keys)
	return keys, nil
}

// emptyStatusWait bounds the stream-state ask of emptyByLeader.
const emptyStatusWait = 2 * time.Second

// emptyByLeader reports whether the bucket's stream holds no byte by the
// state of a stream with a leader: a bucket whose stream holds nothing
// holds no object, and List answers so without nats.go's watcher, which
// on a bucket just made on a cluster may never say that its (no) initial
// values are done and holds the List for ListTimeout (a takeover's start
// spent 15 s there, listing its new term's empty bucket). A replicated
// stream with no leader has each replica answer with its own state
// (nats-server v2.15.2 server/jetstream_api.go, isGroupLeaderless), and a
// replica still catching up may hold nothing: that answer, or none
// within emptyStatusWait, is not taken; the watcher lists then.
func (n *NATS) emptyByLeader(ctx context.Context) bool {
	sctx, cancel := context.WithTimeout(ctx, emptyStatusWait)
	defer cancel()
	st, err := n.os.Status(sctx)
	if err != nil || st.Size() != 0 {
		return false
	}
	bs, ok := st.(*jetstream.ObjectBucketStatus)
	if !ok {
		return false
	}
	si := bs.StreamInfo()
	return si != nil && (si.Cluster == nil || si.Cluster.Leader != "")
}

// Delete implements Store.
func (n *NATS) Delete(ctx context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if err := n.os.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("store: nats: delete %s: %w", key, err)
	}
	return nil
}
