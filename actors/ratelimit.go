package actors

import (
	"sort"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// RateLimiter decides which repeated log lines get written: at most one per
// key per interval; the lines held back in between are counted and reported
// with the next line written for that key, or by Flush once the key has been
// quiet for an interval. It is pure (time is an argument) and not safe for
// concurrent use; LimitedLogger wraps it for shells.
type RateLimiter struct {
	interval time.Duration
	keys     map[string]*rateEntry
}

type rateEntry struct {
	last       time.Time
	suppressed int
}

// Suppressed is the summary of the lines held back for one key.
type Suppressed struct {
	Key   string
	Count int
}

// NewRateLimiter returns a limiter that lets one line per key through per
// interval. A non-positive interval lets everything through.
func NewRateLimiter(interval time.Duration) *RateLimiter {
	return &RateLimiter{interval: interval, keys: map[string]*rateEntry{}}
}

// Allow reports whether a line for key may be written at now. When it may,
// suppressed is how many lines for key were held back since the last one
// written, so the caller can say so in the same line.
func (r *RateLimiter) Allow(now time.Time, key string) (ok bool, suppressed int) {
	if r.interval <= 0 {
		return true, 0
	}
	e, found := r.keys[key]
	if !found {
		r.keys[key] = &rateEntry{last: now}
		return true, 0
	}
	if now.Sub(e.last) >= r.interval {
		n := e.suppressed
		e.last, e.suppressed = now, 0
		return true, n
	}
	e.suppressed++
	return false, 0
}

// Flush forgets every key that has been quiet for at least an interval and
// returns, sorted by key, the ones that still had lines held back. Calling it
// now and then keeps the key set bounded and makes sure a burst that stopped
// is still summarised.
func (r *RateLimiter) Flush(now time.Time) []Suppressed {
	var out []Suppressed
	for k, e := range r.keys {
		if now.Sub(e.last) < r.interval {
			continue
		}
		if e.suppressed > 0 {
			out = append(out, Suppressed{Key: k, Count: e.suppressed})
		}
		delete(r.keys, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// Len is the number of keys tracked.
func (r *RateLimiter) Len() int { return len(r.keys) }

// LimitedLogger is a zerolog logger whose events are rate-limited per key.
// It is safe for concurrent use (bridges log from bus goroutines).
type LimitedLogger struct {
	mu        sync.Mutex
	rl        *RateLimiter
	clock     Clock
	log       zerolog.Logger
	interval  time.Duration
	lastFlush time.Time
}

// NewLimitedLogger returns a logger that writes at most one event per key per
// interval to log, timed by clock.
func NewLimitedLogger(log zerolog.Logger, clock Clock, interval time.Duration) *LimitedLogger {
	return &LimitedLogger{rl: NewRateLimiter(interval), clock: clock, log: log, interval: interval, lastFlush: clock.Now()}
}

// Event returns an event at level for key, or nil (which zerolog treats as a
// disabled event: every method on it is a no-op) when the key is over its
// rate. An event that follows suppressed ones carries "suppressed": n.
func (l *LimitedLogger) Event(level zerolog.Level, key string) *zerolog.Event {
	l.mu.Lock()
	now := l.clock.Now()
	ok, n := l.rl.Allow(now, key)
	var summaries []Suppressed
	if l.interval > 0 && now.Sub(l.lastFlush) >= l.interval {
		summaries = l.rl.Flush(now)
		l.lastFlush = now
	}
	l.mu.Unlock()
	for _, s := range summaries {
		l.log.WithLevel(level).Str("key", s.Key).Int("suppressed", s.Count).Msg("repeated log lines suppressed")
	}
	if !ok {
		return nil
	}
	ev := l.log.WithLevel(level)
	if n > 0 {
		ev = ev.Int("suppressed", n)
	}
	return ev
}

// Warn is Event(zerolog.WarnLevel, key).
func (l *LimitedLogger) Warn(key string) *zerolog.Event { return l.Event(zerolog.WarnLevel, key) }

// Error is Event(zerolog.ErrorLevel, key).
func (l *LimitedLogger) Error(key string) *zerolog.Event { return l.Event(zerolog.ErrorLevel, key) }
