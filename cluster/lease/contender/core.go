package contender

import (
	"fmt"
	"time"
)

// Op is the KV call the core wants made now.
type Op int

const (
	// OpNone: nothing to do until NextAt.
	OpNone Op = iota
	// OpAcquire: Create the key (succeeds only when it is absent) with
	// Encode of this contender's Holder and Instance, Token 0.
	OpAcquire
	// OpRenew: Update the key at Status.Revision with Encode of this
	// contender's Holder, Instance and Status.Token.
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
// outcome with exactly one of Acquired, Taken, Renewed, Refused (Resynced,
// Lost) or Failed. Tick steps the holder down when its local deadline
// passes. Time is an input; Core has no goroutines, locks or I/O.
type Core struct {
	t      Timing
	leader bool
	// confirming: the key holds this contender's own Create that landed
	// after its call failed here (Taken judged it); a renewal at its
	// revision confirms the term before the lease counts as held, because
	// when that Create reached the server, and so when the server lets the
	// key expire, is unknown.
	confirming bool
	token      uint64
	rev        uint64
	until      time.Time // leader: local expiry deadline
	next       time.Time // when the next op is due
	inflight   Op
	sentAt     time.Time
	failures   int
	reported   bool // the leadership Changed last reported
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
	if c.leader || c.confirming {
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

// Taken reports that Create found the key present, with the key as read
// right after (found false: no key, or the read failed); self is this
// contender's Holder and Instance. When the key is
// this contender's own Create that landed after an earlier call of its
// timed out here (JudgeTaken: RefusalLanded), the core adopts that term
// and renews at once to confirm it: the lease is held from the
// renewal's send time (Renewed), not left to expire unrenewed for a TTL
// while a standby waits. Otherwise someone else holds the lease, and the
// contender tries again after RenewInterval. Taken returns the verdict.
func (c *Core) Taken(key Holding, found bool, self Holding) Refusal {
	c.done(OpAcquire)
	c.failures = 0
	v := JudgeTaken(key, found, self, c.token)
	if v != RefusalLanded {
		c.next = c.sentAt.Add(c.t.RenewInterval)
		return v
	}
	c.confirming, c.token, c.rev = true, key.Revision, key.Revision
	c.next = c.sentAt
	return v
}

// Renewed reports a successful Update; rev is the key's new revision. It
// confirms a term Taken adopted.
func (c *Core) Renewed(rev uint64) {
	c.done(OpRenew)
	c.failures = 0
	switch {
	case c.confirming:
		c.confirming, c.leader = false, true
	case !c.leader: // the local deadline passed while the renewal was in flight
		return // the write landed, but we already told the shell we lost: stay down; the key expires
	}
	c.rev = rev
	c.until = c.sentAt.Add(c.t.TTL - c.t.Margin)
	c.next = c.sentAt.Add(c.t.RenewInterval)
}

// Refused reports that Update was refused (revision mismatch, or no key:
// found false), with the key as read after the refusal, and returns the
// verdict (JudgeRefusal): RefusalLanded resyncs (Resynced); anything else
// — RefusalReadAgain included, when the shell's reads never got past a
// stale replica — loses the lease (Lost).
func (c *Core) Refused(key Holding, found bool, holder string) Refusal {
	v := JudgeRefusal(key, found, holder, c.token, c.rev)
	if v == RefusalLanded {
		c.Resynced(key.Revision)
	} else {
		c.Lost()
	}
	return v
}

// Lost reports that Update was refused (revision mismatch or the key is
// gone): someone else holds the lease or it expired. The contender becomes
// a follower and tries to acquire again after RenewInterval.
func (c *Core) Lost() {
	c.done(OpRenew)
	c.leader, c.confirming, c.until, c.failures = false, false, time.Time{}, 0
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
// own deadline is no earlier than the local one). A term still being
// confirmed stays so.
func (c *Core) Resynced(rev uint64) {
	c.done(OpRenew)
	if !c.leader && !c.confirming { // the local deadline passed meanwhile: stay down, as Renewed does
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

// Resignable is the key revision a resign deletes at now: the held
// lease's, or the contender's own landed Create it is confirming (Taken),
// which would otherwise sit in the key for a TTL after a stop. ok is
// false when the contender holds nothing.
func (c *Core) Resignable(now time.Time) (rev uint64, ok bool) {
	c.Tick(now)
	if !c.leader && !c.confirming {
		return 0, false
	}
	return c.rev, true
}

// Resigned reports that the holder deleted its key on purpose at now. It
// waits one RenewInterval before contending again, so a standby (which
// polls every RenewInterval) gets the lease instead of the resigner. It
// returns whether leadership had been reported (Changed), so the shell
// reports the loss.
func (c *Core) Resigned(now time.Time) bool {
	was := c.reported
	c.leader, c.confirming, c.until, c.reported = false, false, time.Time{}, false
	c.next = now.Add(c.t.RenewInterval)
	return was
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

// Changed is Status at now, and whether its leadership differs from what
// Changed last returned (or Resigned took back): the shell reports a
// change of leadership once.
func (c *Core) Changed(now time.Time) (Status, bool) {
	st := c.Status(now)
	ch := st.Leader != c.reported
	c.reported = st.Leader
	return st, ch
}
