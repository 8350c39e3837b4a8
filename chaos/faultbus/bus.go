package faultbus

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/asyncrl/asyncrl/transport"
)

// ErrRule marks an invalid rule.
var ErrRule = errors.New("faultbus: invalid rule")

// Rule is a fault on the publishes whose subject matches Subject.
type Rule struct {
	// Subject is a NATS subject pattern ('*' and '>' wildcards).
	Subject string
	// Drop is the probability a publish is lost, in [0, 1].
	Drop float64
	// Duplicate is the probability a publish is sent twice, in [0, 1].
	Duplicate float64
	// Delay holds a publish this long before it is sent (0: none).
	Delay time.Duration
}

func (r Rule) validate() error {
	var errs []error
	if err := transport.ValidatePattern(r.Subject); err != nil {
		errs = append(errs, fmt.Errorf("subject %q: %w", r.Subject, err))
	}
	if r.Drop < 0 || r.Drop > 1 {
		errs = append(errs, fmt.Errorf("drop: must be in [0, 1], got %v", r.Drop))
	}
	if r.Duplicate < 0 || r.Duplicate > 1 {
		errs = append(errs, fmt.Errorf("duplicate: must be in [0, 1], got %v", r.Duplicate))
	}
	if r.Delay < 0 {
		errs = append(errs, fmt.Errorf("delay: must be ≥ 0, got %v", r.Delay))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrRule, err)
	}
	return nil
}

// Stats counts the faults applied.
type Stats struct {
	Published, Dropped, Delayed, Duplicated int64
}

// Bus is the fault-injecting decorator.
type Bus struct {
	inner transport.Bus

	mu     sync.Mutex
	rng    *rand.Rand
	rules  []Rule
	stats  Stats
	closed bool
	done   chan struct{}
	wg     sync.WaitGroup
}

var _ transport.Bus = (*Bus)(nil)

// Wrap decorates inner; with no rules it is a pass-through.
func Wrap(inner transport.Bus, seed int64) *Bus {
	return &Bus{inner: inner, rng: rand.New(rand.NewPCG(uint64(seed), 0x66617562)), done: make(chan struct{})}
}

// SetRules replaces the rules (none: pass everything).
func (b *Bus) SetRules(rules ...Rule) error {
	for i, r := range rules {
		if err := r.validate(); err != nil {
			return fmt.Errorf("rule %d: %w", i, err)
		}
	}
	b.mu.Lock()
	b.rules = append([]Rule(nil), rules...)
	b.mu.Unlock()
	return nil
}

// Stats returns the counters.
func (b *Bus) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats
}

// verdict is what happens to one publish.
type verdict struct {
	drop, dup bool
	delay     time.Duration
}

func (b *Bus) decide(subject string) verdict {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stats.Published++
	for _, r := range b.rules {
		if !transport.SubjectMatches(r.Subject, subject) {
			continue
		}
		var v verdict
		if r.Drop > 0 && b.rng.Float64() < r.Drop {
			b.stats.Dropped++
			return verdict{drop: true}
		}
		if r.Delay > 0 {
			v.delay = r.Delay
			b.stats.Delayed++
		}
		if r.Duplicate > 0 && b.rng.Float64() < r.Duplicate {
			v.dup = true
			b.stats.Duplicated++
		}
		return v
	}
	return verdict{}
}

// Publish applies the first matching rule, then publishes on inner.
func (b *Bus) Publish(ctx context.Context, subject string, data []byte) error {
	v := b.decide(subject)
	if v.drop {
		return nil
	}
	n := 1
	if v.dup {
		n = 2
	}
	if v.delay <= 0 {
		for range n {
			if err := b.inner.Publish(ctx, subject, data); err != nil {
				return err
			}
		}
		return nil
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil // closing: a delayed message is simply lost
	}
	b.wg.Add(1)
	b.mu.Unlock()
	cp := append([]byte(nil), data...) // the caller may reuse data
	go func() {
		defer b.wg.Done()
		t := time.NewTimer(v.delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-b.done:
			return
		}
		for range n {
			// The sender's ctx may be gone by now; a late message is sent
			// on the bus's own terms, as the network would.
			_ = b.inner.Publish(context.Background(), subject, cp)
		}
	}()
	return nil
}

// Subscribe passes through.
func (b *Bus) Subscribe(subject string, h transport.Handler) (transport.Subscription, error) {
	return b.inner.Subscribe(subject, h)
}

// QueueSubscribe passes through.
func (b *Bus) QueueSubscribe(subject, queue string, h transport.Handler) (transport.Subscription, error) {
	return b.inner.QueueSubscribe(subject, queue, h)
}

// Request passes through.
func (b *Bus) Request(ctx context.Context, subject string, data []byte) (*transport.Msg, error) {
	return b.inner.Request(ctx, subject, data)
}

// Respond passes through.
func (b *Bus) Respond(ctx context.Context, req *transport.Msg, data []byte) error {
	return b.inner.Respond(ctx, req, data)
}

// Stream passes through.
func (b *Bus) Stream(ctx context.Context, cfg transport.StreamConfig) (transport.Stream, error) {
	return b.inner.Stream(ctx, cfg)
}

// MaxPayload passes through.
func (b *Bus) MaxPayload() int { return b.inner.MaxPayload() }

// Close drops delayed publishes not yet sent and closes inner.
func (b *Bus) Close() error {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.done)
	}
	b.mu.Unlock()
	b.wg.Wait()
	return b.inner.Close()
}
