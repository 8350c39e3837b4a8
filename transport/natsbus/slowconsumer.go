package natsbus

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
)

// A plain or queue subscription whose handler is busy (an actor bridge
// waiting for mailbox room) has its messages buffered by the client, up to
// Options.PendingMsgs and PendingBytes. Past them nats.go drops messages and
// reports a slow consumer once per episode; the per-subscription drop count
// is exact, so natsbus sums it here rather than counting reports.

// SlowConsumerDrops is the number of messages NATS dropped because a
// subscription's pending limits were exceeded, over every plain and queue
// subscription this bus made (live or gone).
func (b *Bus) SlowConsumerDrops() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.retiredDrops
	for s := range b.subs {
		if d, err := s.s.Dropped(); err == nil {
			n += int64(d)
		}
	}
	return n
}

// Collectors are the bus's Prometheus metrics, evaluated at scrape time:
// asyncrl_bus_slow_consumer_dropped_total.
func (b *Bus) Collectors() []prometheus.Collector {
	return []prometheus.Collector{prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "asyncrl_bus_slow_consumer_dropped_total",
		Help: "Messages NATS dropped because a subscription's handler fell behind past its pending limits (natsbus Options.PendingMsgs/PendingBytes).",
	}, func() float64 { return float64(b.SlowConsumerDrops()) })}
}

// retire moves s's drops into retiredDrops before it is unsubscribed (a
// closed subscription no longer reports them); once per subscription.
func (b *Bus) retire(s *sub) {
	b.mu.Lock()
	b.retireLocked(s)
	b.mu.Unlock()
}

func (b *Bus) retireLocked(s *sub) {
	if _, ok := b.subs[s]; !ok {
		return
	}
	delete(b.subs, s)
	if d, err := s.s.Dropped(); err == nil {
		b.retiredDrops += int64(d)
	}
}

// slowConsumer logs nats.go's slow-consumer report for s, at most one line
// per slowLogInterval (with the count of reports held back).
func (b *Bus) slowConsumer(s *nats.Subscription) {
	ok, held := b.slowLog.allow(time.Now())
	if !ok {
		return
	}
	ev := b.log.Error().Int("held_back", held).Int64("dropped_total", b.SlowConsumerDrops()).
		Int("pending_msgs_limit", b.opts.PendingMsgs).Int("pending_bytes_limit", b.opts.PendingBytes)
	if s != nil {
		ev = ev.Str("subject", s.Subject)
		if d, err := s.Dropped(); err == nil {
			ev = ev.Int("dropped", d)
		}
	}
	ev.Msg("natsbus: slow consumer: a subscription's handler fell behind past its pending limits; NATS dropped messages")
}

// slowLogInterval spaces the slow-consumer log lines.
const slowLogInterval = 10 * time.Second

// rateLimited allows one event per slowLogInterval and counts the rest.
type rateLimited struct {
	mu   sync.Mutex
	last time.Time
	held int
}

func (r *rateLimited) allow(now time.Time) (ok bool, held int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.last.IsZero() && now.Sub(r.last) < slowLogInterval {
		r.held++
		return false, 0
	}
	held, r.held, r.last = r.held, 0, now
	return true, held
}
