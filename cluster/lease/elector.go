package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

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
	Timing Timing
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
	OnChange func(Status)
	// Logger receives the elector's logs (default zerolog.Nop()).
	Logger zerolog.Logger
	// Registerer receives the asyncrl_lease_* metrics, labelled with role
	// and holder; nil registers nowhere.
	Registerer prometheus.Registerer
}

// DefaultConfig returns a config for role and holder with a 3s TTL: a
// standby takes over within about 3.75s of the holder's last renewal.
func DefaultConfig(role, holder string) Config {
	return Config{Bucket: DefaultBucket, Role: role, Holder: holder, Timing: DefaultTiming(3 * time.Second),
		Replicas: 1, ResignOnStop: true, Logger: zerolog.Nop()}
}

// Validate names the field at fault and the allowed values.
func (c Config) Validate() error {
	if err := transport.ValidToken(c.Bucket); err != nil {
		return fmt.Errorf("%w: Bucket: %w", ErrBadConfig, err)
	}
	if err := transport.ValidToken(c.Role); err != nil {
		return fmt.Errorf("%w: Role: %w", ErrBadConfig, err)
	}
	if c.Holder == "" {
		return fmt.Errorf("%w: Holder is empty (want the node name)", ErrBadConfig)
	}
	if c.Replicas < 0 || c.Replicas > 5 {
		return fmt.Errorf("%w: Replicas %d (allowed: 1..5, 0 for 1)", ErrBadConfig, c.Replicas)
	}
	if c.CallTimeout < 0 {
		return fmt.Errorf("%w: CallTimeout %s (allowed: >= 0, 0 for RenewInterval)", ErrBadConfig, c.CallTimeout)
	}
	return c.Timing.Validate()
}

// Holding is what the lease key says: who holds it, and the term's token.
type Holding struct {
	Holder string `json:"holder"`
	// Token is the revision at which the holder acquired the lease.
	Token uint64 `json:"token"`
	// Revision is the key's current revision (Token or a later renewal).
	Revision uint64 `json:"-"`
}

// Elector runs one contender for one lease.
type Elector struct {
	cfg Config
	kv  jetstream.KeyValue
	log zerolog.Logger
	met *metrics

	mu   sync.Mutex
	core *Core
	last bool // leadership last reported to OnChange
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
	core, err := NewCore(cfg.Timing)
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
	return &Elector{cfg: cfg, kv: kv, log: cfg.Logger.With().Str("lease", cfg.Role).Str("holder", cfg.Holder).Logger(), met: met, core: core}, nil
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
			ErrBadConfig, cfg.Bucket, st.TTL(), cfg.Timing.TTL)
	}
	return kv, nil
}

// Status is this contender's view now.
func (e *Elector) Status() Status {
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
func (e *Elector) Holder(ctx context.Context) (h Holding, ok bool, err error) {
	ent, err := e.kv.Get(ctx, e.cfg.Role)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Holding{}, false, nil
	}
	if err != nil {
		return Holding{}, false, fmt.Errorf("lease: read %s: %w", e.cfg.Role, err)
	}
	if err := json.Unmarshal(ent.Value(), &h); err != nil {
		return Holding{}, false, fmt.Errorf("lease: decode %s: %w", e.cfg.Role, err)
	}
	h.Revision = ent.Revision()
	if h.Token == 0 { // only the acquiring Create carries no token: its revision is the token
		h.Token = h.Revision
	}
	return h, true, nil
}

// Tick performs the op the core wants now, if any, and returns the status
// afterwards plus when Tick should next be called. It calls OnChange on a
// change of leadership. Run calls it in a loop; tests call it directly to
// play a holder that pauses.
func (e *Elector) Tick(ctx context.Context) (Status, time.Time) {
	e.mu.Lock()
	op := e.core.Due(time.Now())
	rev, token, until := e.core.Revision(), e.core.token, e.core.until
	e.mu.Unlock()

	newRev, landed, seen, err := e.call(ctx, op, rev, token, until)

	e.mu.Lock()
	switch {
	case op == OpNone:
	case err == nil && op == OpAcquire:
		e.core.Acquired(newRev)
		e.met.acquired.Inc()
		e.log.Info().Uint64("token", newRev).Msg("lease acquired")
	case err == nil:
		e.core.Renewed(newRev)
	case op == OpAcquire && errors.Is(err, jetstream.ErrKeyExists):
		e.core.Taken()
	case op == OpRenew && errors.Is(err, jetstream.ErrKeyRevisionMismatch) && landed > rev:
		e.core.Resynced(landed)
		e.log.Debug().Uint64("revision", landed).Msg("lease: an earlier renewal landed after its call timed out; renewing at its revision")
	case op == OpRenew && (errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound)):
		e.core.Lost()
		e.log.Warn().Uint64("token", token).Str("key", seen).Msg("lease lost: renewal refused (expired or taken over)")
	default:
		e.core.Failed()
		e.met.failures.Inc()
		e.log.Debug().Err(err).Str("op", op.String()).Msg("lease call failed; retrying")
	}
	now := time.Now()
	st := e.core.Status(now)
	next := e.core.NextAt()
	changed := st.Leader != e.last
	e.last = st.Leader
	e.mu.Unlock()
	if changed {
		if st.Leader {
			e.met.leader.Set(1)
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

// call makes op's KV call. A renewal refused at rev may be our own
// earlier one, timed out here but applied by the server: then the key
// still holds our term and landed is its revision (else 0, and seen says
// what the key held, for the log).
func (e *Elector) call(ctx context.Context, op Op, rev, token uint64, until time.Time) (newRev, landed uint64, seen string, err error) {
	cctx, cancel := context.WithTimeout(ctx, e.cfg.CallTimeout)
	switch op {
	case OpAcquire:
		// The value carries the token, which is the revision Create will
		// return: we cannot know it in advance, so the first write records
		// the holder and the renewal right after it records the token.
		newRev, err = e.kv.Create(cctx, e.cfg.Role, e.value(0))
	case OpRenew:
		newRev, err = e.kv.Update(cctx, e.cfg.Role, e.value(token), rev)
	}
	cancel()
	if op == OpRenew && errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		landed, seen = e.ownRevision(ctx, rev, token, until)
	}
	return newRev, landed, seen, err
}

// ownRevision reads the lease key after a renewal at rev was refused and
// returns its revision when it still holds this contender's term (this
// holder, token) at a revision past rev, else 0 and what it saw; the
// verdict on each read is the core's JudgeRefusal. KV reads may be served
// by a replica that has not applied the newest write yet (direct get): a
// read showing
// our term at rev or older is stale (the server just refused rev), so it
// is read again until CallTimeout, and never past the holder's local
// deadline until (the step-down it would report must not come later than
// the deadline the core keeps).
func (e *Elector) ownRevision(ctx context.Context, rev, token uint64, until time.Time) (uint64, string) {
	end := time.Now().Add(e.cfg.CallTimeout)
	if !until.IsZero() && until.Before(end) {
		end = until
	}
	cctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	seen := "nothing read"
	for {
		h, ok, err := e.Holder(cctx)
		switch {
		case err != nil:
			seen = "read failed: " + err.Error()
		case !ok:
			return 0, "no key (expired or deleted)"
		default:
			switch JudgeRefusal(h, ok, e.cfg.Holder, token, rev) {
			case RefusalLost:
				return 0, fmt.Sprintf("held by %s with token %d", h.Holder, h.Token)
			case RefusalLanded:
				return h.Revision, ""
			case RefusalReadAgain:
				seen = fmt.Sprintf("our term at revision %d (a stale replica)", h.Revision)
			}
		}
		select {
		case <-cctx.Done():
			return 0, seen
		case <-time.After(e.cfg.Timing.RetryMin / 4):
		}
	}
}

func (e *Elector) value(token uint64) []byte {
	b, _ := json.Marshal(Holding{Holder: e.cfg.Holder, Token: token})
	return b
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
// lease already taken over is left alone). ErrNotLeader when not held.
func (e *Elector) Resign(ctx context.Context) error {
	e.mu.Lock()
	now := time.Now()
	st := e.core.Status(now)
	if !st.Leader {
		e.mu.Unlock()
		return ErrNotLeader
	}
	rev := e.core.Revision()
	e.core.Resigned(now)
	changed := e.last
	e.last = false
	e.mu.Unlock()
	e.met.leader.Set(0)
	err := e.kv.Delete(ctx, e.cfg.Role, jetstream.LastRevision(rev))
	if changed && e.cfg.OnChange != nil {
		e.cfg.OnChange(Status{Token: st.Token, Revision: rev})
	}
	if err != nil {
		return fmt.Errorf("lease: resign %s: %w", e.cfg.Role, err)
	}
	return nil
}
