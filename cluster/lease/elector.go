package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/cluster/lease/contender"
	"github.com/asyncrl/asyncrl/transport"
)

// DefaultBucket is the KV bucket leases live in unless Config.Bucket says
// otherwise.
const DefaultBucket = "asyncrl_leases"

// Config configures an Elector.
type Config struct {
	// Bucket is the KV bucket (letters, digits, '-', '_'). Every lease in a
	// bucket shares its TTL, so roles with different TTLs need different
	// buckets. Default DefaultBucket.
	Bucket string
	// Role is the lease key: the singleton role (trainer, publisher,
	// controller), optionally qualified by run ("run1-trainer").
	Role string
	// Holder identifies this contender (the node name); it is written as the
	// key's value so others can see who holds the lease.
	Holder string
	// Timing is the decision logic's configuration (DefaultTiming(TTL)).
	Timing contender.Timing
	// Memory keeps the bucket in memory instead of on disk. Leases need no
	// durability (an expired lease is the safe default), but file storage
	// keeps the revision counter, hence fencing tokens, monotonic across a
	// server restart. Default false.
	Memory bool
	// Replicas is the bucket's replication factor in a clustered JetStream
	// (1 on a single server; 3 in a three-node cluster, so a minority side
	// cannot write it). Default 1.
	Replicas int
	// CallTimeout bounds each KV call (default RenewInterval).
	CallTimeout time.Duration
	// ResignOnStop deletes the key when Run returns while holding the lease,
	// so a standby takes over at once instead of after TTL. Default true.
	ResignOnStop bool
	// OnChange is called from Run's goroutine whenever leadership changes
	// (won: Leader true with the new Token; lost: Leader false). May be nil.
	OnChange func(contender.Status)
	// Logger receives the elector's logs (default zerolog.Nop()).
	Logger zerolog.Logger
	// Registerer receives the asyncrl_lease_* metrics, labelled with role
	// and holder; nil registers nowhere.
	Registerer prometheus.Registerer
}

// DefaultConfig returns a config for role and holder with a 3s TTL: a
// standby takes over within about 3.75s of the holder's last renewal.
func DefaultConfig(role, holder string) Config {
	return Config{Bucket: DefaultBucket, Role: role, Holder: holder, Timing: contender.DefaultTiming(3 * time.Second),
		Replicas: 1, ResignOnStop: true, Logger: zerolog.Nop()}
}

// Validate names the field at fault and the allowed values.
func (c Config) Validate() error {
	if err := transport.ValidToken(c.Bucket); err != nil {
		return fmt.Errorf("%w: Bucket: %w", contender.ErrBadConfig, err)
	}
	if err := transport.ValidToken(c.Role); err != nil {
		return fmt.Errorf("%w: Role: %w", contender.ErrBadConfig, err)
	}
	if c.Holder == "" {
		return fmt.Errorf("%w: Holder is empty (want the node name)", contender.ErrBadConfig)
	}
	if c.Replicas < 0 || c.Replicas > 5 {
		return fmt.Errorf("%w: Replicas %d (allowed: 1..5, 0 for 1)", contender.ErrBadConfig, c.Replicas)
	}
	if c.CallTimeout < 0 {
		return fmt.Errorf("%w: CallTimeout %s (allowed: >= 0, 0 for RenewInterval)", contender.ErrBadConfig, c.CallTimeout)
	}
	return c.Timing.Validate()
}

// Elector runs one contender for one lease.
type Elector struct {
	cfg Config
	kv  jetstream.KeyValue
	log zerolog.Logger
	met *metrics

	// self is this elector's Holder and Instance (random, so a restarted
	// node never takes up a Create of its previous life as its own).
	self contender.Holding

	mu   sync.Mutex
	core *contender.Core
}

// New opens (creating when absent) the bucket on nc and returns an elector
// that has not contended yet: call Run, or Tick from your own loop.
func New(ctx context.Context, nc *nats.Conn, cfg Config) (*Elector, error) {
	if cfg.Bucket == "" {
		cfg.Bucket = DefaultBucket
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = cfg.Timing.RenewInterval
	}
	core, err := contender.NewCore(cfg.Timing)
	if err != nil {
		return nil, err
	}
	kv, err := openBucket(ctx, nc, cfg)
	if err != nil {
		return nil, err
	}
	met, err := newMetrics(cfg.Registerer, cfg.Role, cfg.Holder)
	if err != nil {
		return nil, err
	}
	var nonce [8]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, fmt.Errorf("lease: an instance id: %w", err)
	}
	self := contender.Holding{Holder: cfg.Holder, Instance: hex.EncodeToString(nonce[:])}
	return &Elector{cfg: cfg, self: self, kv: kv, log: cfg.Logger.With().Str("lease", cfg.Role).Str("holder", cfg.Holder).Logger(), met: met, core: core}, nil
}

func openBucket(ctx context.Context, nc *nats.Conn, cfg Config) (jetstream.KeyValue, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("lease: jetstream: %w", err)
	}
	storage := jetstream.FileStorage
	if cfg.Memory {
		storage = jetstream.MemoryStorage
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: cfg.Bucket, Description: "asyncrl singleton-role leases",
		History: 1, TTL: cfg.Timing.TTL, Storage: storage, Replicas: cfg.Replicas,
	})
	if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		kv, err = js.KeyValue(ctx, cfg.Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("lease: open bucket %s: %w", cfg.Bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("lease: bucket %s status: %w", cfg.Bucket, err)
	}
	if st.TTL() != cfg.Timing.TTL {
		return nil, fmt.Errorf("%w: bucket %s has TTL %s, this lease wants %s (one TTL per bucket: use another Bucket)",
			contender.ErrBadConfig, cfg.Bucket, st.TTL(), cfg.Timing.TTL)
	}
	return kv, nil
}

// Instance is this elector's instance id, written into the key with its
// Holder: it tells a Create of this elector's that landed after its call
// timed out from one of the same node's earlier life.
func (e *Elector) Instance() string { return e.self.Instance }

// Status is this contender's view now.
func (e *Elector) Status() contender.Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.core.Status(time.Now())
}

// Token returns the fencing token while this contender holds the lease,
// or ErrNotLeader.
func (e *Elector) Token() (uint64, error) {
	st := e.Status()
	if !st.Leader {
		return 0, fmt.Errorf("%w: %s is not held by %s", ErrNotLeader, e.cfg.Role, e.cfg.Holder)
	}
	return st.Token, nil
}

// Holder reads who holds the lease now; ok is false when nobody does.
func (e *Elector) Holder(ctx context.Context) (h contender.Holding, ok bool, err error) {
	ent, err := e.kv.Get(ctx, e.cfg.Role)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return contender.Holding{}, false, nil
	}
	if err != nil {
		return contender.Holding{}, false, fmt.Errorf("lease: read %s: %w", e.cfg.Role, err)
	}
	if h, err = contender.Decode(ent.Value(), ent.Revision()); err != nil {
		return contender.Holding{}, false, fmt.Errorf("lease: key %s: %w", e.cfg.Role, err)
	}
	return h, true, nil
}

// Tick performs the op the core wants now, if any, and returns the status
// afterwards plus when Tick should next be called. It calls OnChange on a
// change of leadership. Run calls it in a loop; tests call it directly to
// play a holder that pauses.
func (e *Elector) Tick(ctx context.Context) (contender.Status, time.Time) {
	e.mu.Lock()
	now := time.Now()
	op := e.core.Due(now)
	st := e.core.Status(now)
	e.mu.Unlock()

	res := e.call(ctx, op, st)

	e.mu.Lock()
	e.outcome(op, st, res)
	st, changed := e.core.Changed(time.Now())
	next := e.core.NextAt()
	e.mu.Unlock()
	if changed {
		if st.Leader {
			e.met.leader.Set(1)
			e.met.acquired.Inc()
			e.log.Info().Uint64("token", st.Token).Msg("lease acquired")
		} else {
			e.met.leader.Set(0)
			e.met.lost.Inc()
			e.log.Warn().Uint64("token", st.Token).Msg("lease no longer held")
		}
		if e.cfg.OnChange != nil {
			e.cfg.OnChange(st)
		}
	}
	return st, next
}

// result is what an op's KV call came back with: the revision written or
// the error and, after a refusal, the key as read.
type result struct {
	written uint64
	err     error
	key     contender.Holding
	found   bool
}

// outcome reports the call's result to the core (e.mu held).
func (e *Elector) outcome(op contender.Op, st contender.Status, r result) {
	switch {
	case op == contender.OpNone:
	case r.err == nil && op == contender.OpAcquire:
		e.core.Acquired(r.written)
	case r.err == nil:
		e.core.Renewed(r.written)
	case op == contender.OpAcquire && errors.Is(r.err, jetstream.ErrKeyExists):
		if e.core.Taken(r.key, r.found, e.self) == contender.RefusalLanded {
			e.log.Info().Uint64("revision", r.key.Revision).Msg("lease: an earlier acquire landed after its call timed out; confirming it with a renewal")
		}
	case op == contender.OpRenew && (errors.Is(r.err, jetstream.ErrKeyRevisionMismatch) || errors.Is(r.err, jetstream.ErrKeyNotFound)):
		switch e.core.Refused(r.key, r.found, e.cfg.Holder) {
		case contender.RefusalLanded:
			e.log.Debug().Uint64("revision", r.key.Revision).Msg("lease: an earlier renewal landed after its call timed out; renewing at its revision")
		default:
			e.log.Warn().Uint64("token", st.Token).Str("key", seen(r)).Msg("lease: renewal refused (expired or taken over)")
		}
	default:
		e.core.Failed()
		e.met.failures.Inc()
		e.log.Debug().Err(r.err).Str("op", op.String()).Msg("lease call failed; retrying")
	}
}

func seen(r result) string {
	if !r.found {
		return "no key (expired or deleted), or no read"
	}
	return fmt.Sprintf("held by %s with token %d at revision %d", r.key.Holder, r.key.Token, r.key.Revision)
}

// call makes op's KV call for the status st the core had when it asked
// for it. A write refused because of the key's state may be our own
// earlier one, timed out here but applied by the server: the key is read
// after it, for the core to judge.
// A holder's renewal gives up at its local deadline (contender.CallBudget).
func (e *Elector) call(ctx context.Context, op contender.Op, st contender.Status) (r result) {
	cctx, cancel := context.WithTimeout(ctx, contender.CallBudget(op, st, time.Now(), e.cfg.CallTimeout))
	switch op {
	case contender.OpAcquire:
		r.written, r.err = e.kv.Create(cctx, e.cfg.Role, contender.Encode(e.self))
	case contender.OpRenew:
		r.written, r.err = e.kv.Update(cctx, e.cfg.Role, contender.Encode(contender.Holding{Holder: e.self.Holder, Instance: e.self.Instance, Token: st.Token}), st.Revision)
	}
	cancel()
	switch {
	case op == contender.OpAcquire && errors.Is(r.err, jetstream.ErrKeyExists):
		rctx, cancel := context.WithTimeout(ctx, e.cfg.CallTimeout)
		r.key, r.found, _ = e.Holder(rctx) // a failed read is no key: the core waits and tries again
		cancel()
	case op == contender.OpRenew && errors.Is(r.err, jetstream.ErrKeyRevisionMismatch):
		r.key, r.found = e.readRefused(ctx, st)
	}
	return r
}

// readRefused reads the lease key after a renewal at st.Revision was
// refused, until the read is no stale replica's (JudgeRefusal: KV reads
// may be served by a replica that has not applied the newest write yet,
// and a read showing our term at the refused revision or older is one),
// for CallTimeout and never past the holder's local deadline (the
// step-down it would report must not come later than the deadline the
// core keeps). The core judges the last read.
func (e *Elector) readRefused(ctx context.Context, st contender.Status) (contender.Holding, bool) {
	now := time.Now()
	cctx, cancel := context.WithDeadline(ctx, now.Add(contender.CallBudget(contender.OpRenew, st, now, e.cfg.CallTimeout)))
	defer cancel()
	for {
		h, ok, err := e.Holder(cctx)
		if err == nil && contender.JudgeRefusal(h, ok, e.cfg.Holder, st.Token, st.Revision) != contender.RefusalReadAgain {
			return h, ok
		}
		select {
		case <-cctx.Done():
			return h, ok && err == nil
		case <-time.After(e.cfg.Timing.RetryMin / 4):
		}
	}
}

// Run contends for the lease until ctx ends. When it returns while holding
// the lease and ResignOnStop is set, it deletes the key so a standby takes
// over at once. Run returns nil on cancellation.
func (e *Elector) Run(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if e.cfg.ResignOnStop {
				rctx, cancel := context.WithTimeout(context.Background(), e.cfg.CallTimeout)
				err := e.Resign(rctx)
				cancel()
				if err != nil && !errors.Is(err, ErrNotLeader) {
					e.log.Warn().Err(err).Msg("lease: resign on stop failed; the lease expires after its TTL")
				}
			}
			return nil
		case <-t.C:
		}
		_, next := e.Tick(ctx)
		d := time.Until(next)
		if d < time.Millisecond {
			d = time.Millisecond
		}
		t.Reset(d)
	}
}

// Resign gives the lease up now (a delete at the held revision, so a
// lease already taken over is left alone; also a landed Create being
// confirmed, contender.Core.Resignable). ErrNotLeader when not held.
func (e *Elector) Resign(ctx context.Context) error {
	e.mu.Lock()
	now := time.Now()
	st := e.core.Status(now)
	rev, ok := e.core.Resignable(now)
	if !ok {
		e.mu.Unlock()
		return ErrNotLeader
	}
	changed := e.core.Resigned(now)
	e.mu.Unlock()
	e.met.leader.Set(0)
	err := e.kv.Delete(ctx, e.cfg.Role, jetstream.LastRevision(rev))
	if changed && e.cfg.OnChange != nil {
		e.cfg.OnChange(contender.Status{Token: st.Token, Revision: rev})
	}
	if err != nil {
		return fmt.Errorf("lease: resign %s: %w", e.cfg.Role, err)
	}
	return nil
}
