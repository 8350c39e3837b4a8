package tcp

import (
	"context"
	"sync"
	"time"
)

// bucket is a token bucket core: rate tokens (bytes) per second, at most
// burst saved up. It is pure — now is an input — so the limiter shell
// below can own the clock and the sleeping.
type bucket struct {
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
}

// take removes n tokens (going into debt when short) and returns how long
// the caller must wait before sending them.
func (b *bucket) take(now time.Time, n int) time.Duration {
	if !b.last.IsZero() {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	} else {
		b.tokens = b.burst
	}
	b.last = now
	b.tokens -= float64(n)
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / b.rate * float64(time.Second))
}

// limiter shares one bucket between connections; nil means unlimited.
type limiter struct {
	mu sync.Mutex
	b  bucket
}

func newLimiter(bytesPerSecond int64, burst int) *limiter {
	if bytesPerSecond <= 0 {
		return nil
	}
	return &limiter{b: bucket{rate: float64(bytesPerSecond), burst: float64(burst)}}
}

// wait blocks until n bytes may be sent or ctx ends.
func (l *limiter) wait(ctx context.Context, n int) error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	d := l.b.take(time.Now(), n)
	l.mu.Unlock()
	return sleep(ctx, d)
}
