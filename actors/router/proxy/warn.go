package proxy

import (
	"sync"
	"time"
)

// warnInterval is the least time between two logged warnings of one kind
// for one replica; the ones in between are counted and the count goes
// out with the next one logged. At 131,072 requests in flight a replica
// that dies fails thousands of them at once, one warning each.
const warnInterval = 10 * time.Second

// warnLimiter decides which warnings are logged: at most one per key
// (replica and message) per interval.
type warnLimiter struct {
	mu   sync.Mutex
	last map[warnKey]*warnState
}

type warnKey struct{ replica, msg string }

type warnState struct {
	at         time.Time
	suppressed int
}

// allow reports whether a warning for key at now is logged and, if so,
// how many were suppressed since the last one logged.
func (l *warnLimiter) allow(key warnKey, now time.Time, interval time.Duration) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last = make(map[warnKey]*warnState)
	}
	s := l.last[key]
	if s == nil {
		l.last[key] = &warnState{at: now}
		return true, 0
	}
	if now.Sub(s.at) < interval {
		s.suppressed++
		return false, 0
	}
	n := s.suppressed
	s.at, s.suppressed = now, 0
	return true, n
}

// warn logs an upstream failure, rate-limited per replica and message.
func (r *Router) warn(replica, msg string, err error) {
	ok, suppressed := r.warns.allow(warnKey{replica, msg}, time.Now(), warnInterval)
	if !ok {
		return
	}
	e := r.log.Warn().Err(err).Str("replica", replica)
	if suppressed > 0 {
		e = e.Int("suppressed", suppressed)
	}
	e.Msg(msg)
}
