package contender

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors.
var (
	// ErrBadConfig is returned for an invalid Timing (and, by
	// cluster/lease, an invalid Config).
	ErrBadConfig = errors.New("lease: bad config")
	// ErrFenced is returned when a write carries a fencing token older than
	// one the store has already seen: the writer was deposed.
	ErrFenced = errors.New("lease: fenced off (stale token)")
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

// CheckFence admits a write carrying token when it is not older than the
// largest token the store has seen (stored). Equal tokens are the same
// term and are admitted.
func CheckFence(stored, token uint64) error {
	if token < stored {
		return fmt.Errorf("%w: token %d < %d", ErrFenced, token, stored)
	}
	return nil
}

// CallBudget is how long a KV call for op made at now may wait (the read
// after a refused renewal included): timeout, and for a holder's renewal
// never past its local deadline st.Until — the core is ticked only
// between calls, so a renewal that outlived the deadline would report the
// lost term only after the server may have let the key expire. It is
// ≤ 0 once the deadline has passed.
func CallBudget(op Op, st Status, now time.Time, timeout time.Duration) time.Duration {
	if op == OpRenew && !st.Until.IsZero() {
		return min(timeout, st.Until.Sub(now))
	}
	return timeout
}
