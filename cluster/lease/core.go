package lease

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors.
var (
	// ErrBadConfig is returned for an invalid Timing or Config.
	ErrBadConfig = errors.New("lease: bad config")
	// ErrFenced is returned when a write carries a fencing token older than
	// one the store has already seen: the writer was deposed.
	ErrFenced = errors.New("lease: fenced off (stale token)")
	// ErrNotLeader is returned by operations that need the lease.
	ErrNotLeader = errors.New("lease: not the holder")
)

// Timing is the decision logic's configuration.
type Timing struct {
	// TTL is how long the server keeps the lease after its last renewal.
	TTL time.Duration
	// RenewInterval is how often the holder renews and a standby tries to
	// acquire. It must be well below TTL − Margin so that a couple of lost
	// renewals do not cost the lease (default TTL/4).
	RenewInterval time.Duration
	// Margin is subtracted from TTL when the holder judges locally whether
	// it still holds the lease, to absorb clock-rate drift and the time a
	// write spends in flight (default TTL/10).
	Margin time.Duration
	// RetryMin and RetryMax bound the exponential backoff after a transient
	// failure (timeout, no responders): the n-th consecutive failure waits
	// min(RetryMin·2^(n-1), RetryMax). Defaults RenewInterval/4 and
	// RenewInterval.
	RetryMin, RetryMax time.Duration
}

// DefaultTiming returns timing for ttl with the documented defaults.
func DefaultTiming(ttl time.Duration) Timing {
	ri := ttl / 4
	return Timing{TTL: ttl, RenewInterval: ri, Margin: ttl / 10, RetryMin: ri / 4, RetryMax: ri}
}

// Validate names the field at fault and the allowed values.
func (t Timing) Validate() error {
	switch {
	case t.TTL < 10*time.Millisecond:
		return fmt.Errorf("%w: TTL %s (allowed: >= 10ms)", ErrBadConfig, t.TTL)
	case t.Margin < 0 || t.Margin >= t.TTL/2:
		return fmt.Errorf("%w: Margin %s (allowed: 0 <= Margin < TTL/2 = %s)", ErrBadConfig, t.Margin, t.TTL/2)
	case t.RenewInterval <= 0 || t.RenewInterval > (t.TTL-t.Margin)/2:
		return fmt.Errorf("%w: RenewInterval %s (allowed: 0 < RenewInterval <= (TTL-Margin)/2 = %s)", ErrBadConfig, t.RenewInterval, (t.TTL-t.Margin)/2)
	case t.RetryMin <= 0 || t.RetryMax < t.RetryMin:
		return fmt.Errorf("%w: RetryMin %s, RetryMax %s (allowed: 0 < RetryMin <= RetryMax)", ErrBadConfig, t.RetryMin, t.RetryMax)
	}
	return nil
}

// Op is the KV call the core wants made now.
type Op int

const (
	// OpNone: nothing to do until NextAt.
	OpNone Op = iota
	// OpAcquire: Create the key (succeeds only when it is absent).
	OpAcquire
	// OpRenew: Update the key at Core.Revision.
	OpRenew
)

func (o Op) String() string {
	switch o {
	case OpNone:
		return "none"
	case OpAcquire:
		return "acquire"
	case OpRenew:
		return "renew"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Status is what a contender knows about its lease.
type Status struct {
	// Leader: this contender holds the lease right now.
	Leader bool
	// Token is the fencing token of the current (or last) term: the revision
	// at which this contender acquired the lease; 0 before the first term.
	Token uint64
	// Revision is the key's revision after this contender's last write.
	Revision uint64
	// Until is when the held lease counts as lost unless renewed (zero when
	// not leader).
	Until time.Time
}

// Core is the pure lease state machine of one contender. The shell calls
// Due(now) and, when it returns an op, makes that KV call and reports the
// outcome with exactly one of Acquired, Taken, Renewed, Resynced, Lost or
// Failed. Tick
// steps the holder down when its local deadline passes. Time is an input;
// Core has no goroutines, locks or I/O.
type Core struct {
	t        Timing
	leader   bool
	token    uint64
	rev      uint64
	until    time.Time // leader: local expiry deadline
	next     time.Time // when the next op is due
	inflight Op
	sentAt   time.Time
	failures int
}

// NewCore returns a follower that wants to acquire at once.
func NewCore(t Timing) (*Core, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return &Core{t: t}, nil
}

// Timing returns the configuration.
func (c *Core) Timing() Timing { return c.t }

// Due returns the op to perform now (OpNone when nothing is due or an op
// is already in flight) and marks it in flight, sent at now.
func (c *Core) Due(now time.Time) Op {
	c.Tick(now)
	if c.inflight != OpNone || now.Before(c.next) {
		return OpNone
	}
	op := OpAcquire
	if c.leader {
		op = OpRenew
	}
	c.inflight, c.sentAt = op, now
	return op
}

// NextAt is when Due will next return an op (or the leader's deadline
// passes), so the shell can sleep until then.
func (c *Core) NextAt() time.Time {
	if c.leader && c.until.Before(c.next) {
		return c.until
	}
	return c.next
}

// Revision is the revision a renewal must be made at.
func (c *Core) Revision() uint64 { return c.rev }

func (c *Core) done(want ...Op) Op {
	op := c.inflight
	ok := false
	for _, w := range want {
		ok = ok || op == w
	}
	if !ok {
		panic(fmt.Sprintf("lease: outcome reported for op %s, want one of %v", op, want))
	}
	c.inflight = OpNone
	return op
}

// Acquired reports a successful Create at revision rev: a new term whose
// fencing token is rev.
func (c *Core) Acquired(rev uint64) {
	c.done(OpAcquire)
	if rev <= c.token {
		panic(fmt.Sprintf("lease: acquired at revision %d, not above the previous token %d", rev, c.token))
	}
	c.leader, c.token, c.rev, c.failures = true, rev, rev, 0
	c.until = c.sentAt.Add(c.t.TTL - c.t.Margin)
	c.next = c.sentAt.Add(c.t.RenewInterval)
}

// Taken reports that Create found the key held by someone else.
func (c *Core) Taken() {
	c.done(OpAcquire)
	c.failures = 0
	c.next = c.sentAt.Add(c.t.RenewInterval)
}

// Renewed reports a successful Update; rev is the key's new revision.
func (c *Core) Renewed(rev uint64) {
	c.done(OpRenew)
	c.failures = 0
	if !c.leader { // the local deadline passed while the renewal was in flight
		return // the write landed, but we already told the shell we lost: stay down; the key expires
	}
	c.rev = rev
	c.until = c.sentAt.Add(c.t.TTL - c.t.Margin)
	c.next = c.sentAt.Add(c.t.RenewInterval)
}

// Lost reports that Update was refused (revision mismatch or the key is
// gone): someone else holds the lease or it expired. The contender becomes
// a follower and tries to acquire again after RenewInterval.
func (c *Core) Lost() {
	c.done(OpRenew)
	c.leader, c.until, c.failures = false, time.Time{}, 0
	c.next = c.sentAt.Add(c.t.RenewInterval)
}

// Resynced reports that Update was refused, but the key still holds this
// contender's own term (holder and token): an earlier renewal that the
// shell gave up on (timed out) landed after all, so the key's revision
// moved past Revision. Under delay and loss that is common, and taking it
// for a lost lease would end a healthy term. The core adopts rev and
// renews again at once; the local deadline stays where the last confirmed
// renewal put it, because when the landed write reached the server is
// unknown (only that it was after that renewal was sent, so the server's
// own deadline is no earlier than the local one).
func (c *Core) Resynced(rev uint64) {
	c.done(OpRenew)
	if !c.leader { // the local deadline passed meanwhile: stay down, as Renewed does
		return
	}
	if rev <= c.rev {
		panic(fmt.Sprintf("lease: resynced to revision %d, not above the last written %d", rev, c.rev))
	}
	c.rev = rev
	c.next = c.sentAt
}

// Failed reports a transient failure of the op in flight (timeout, no
// connection). The op is retried after backoff; a leader keeps the lease
// until its local deadline, which Tick enforces.
func (c *Core) Failed() {
	c.done(OpAcquire, OpRenew)
	c.failures++
	d := c.t.RetryMin
	for i := 1; i < c.failures && d < c.t.RetryMax; i++ {
		d *= 2
	}
	c.next = c.sentAt.Add(min(d, c.t.RetryMax))
}

// Resigned reports that the holder deleted its key on purpose at now. It
// waits one RenewInterval before contending again, so a standby (which
// polls every RenewInterval) gets the lease instead of the resigner.
func (c *Core) Resigned(now time.Time) {
	c.leader, c.until = false, time.Time{}
	c.next = now.Add(c.t.RenewInterval)
}

// Tick steps the leader down once its local deadline passed and reports
// whether that happened.
func (c *Core) Tick(now time.Time) bool {
	if c.leader && !now.Before(c.until) {
		c.leader, c.until = false, time.Time{}
		if c.next.Before(now) {
			c.next = now
		}
		return true
	}
	return false
}

// Status is the contender's view at now (Tick first, so a passed deadline
// is never reported as leadership).
func (c *Core) Status(now time.Time) Status {
	c.Tick(now)
	return Status{Leader: c.leader, Token: c.token, Revision: c.rev, Until: c.until}
}

// CheckFence admits a write carrying token when it is not older than the
// largest token the store has seen (stored). Equal tokens are the same
// term and are admitted.
func CheckFence(stored, token uint64) error {
	if token < stored {
		return fmt.Errorf("%w: token %d < %d", ErrFenced, token, stored)
	}
	return nil
}

// Refusal is the verdict on a renewal refused at a revision, from a read
// of the lease key after it.
type Refusal int

const (
	// RefusalLost: the key is gone or holds another term; the lease is lost.
	RefusalLost Refusal = iota
	// RefusalLanded: the key holds this contender's own term past the
	// refused revision — its earlier renewal landed; Resynced adopts it.
	RefusalLanded
	// RefusalReadAgain: the key shows this term at the refused revision
	// or older, which the server has just refused: the read came from a
	// replica that has not applied the newest write yet.
	RefusalReadAgain
)

// JudgeRefusal judges a renewal at rev of holder's term token that the
// server refused, from the key as read (found false: no key). Holder
// names one contender and a term's token is never reused, so only this
// contender's own write can hold its holder and token.
func JudgeRefusal(key Holding, found bool, holder string, token, rev uint64) Refusal {
	switch {
	case !found || key.Holder != holder || key.Token != token:
		return RefusalLost
	case key.Revision > rev:
		return RefusalLanded
	default:
		return RefusalReadAgain
	}
}
