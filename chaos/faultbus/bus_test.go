package faultbus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// embedded wraps a real NATS bus (embedded server, random port).
func embedded(t *testing.T, seed int64) *Bus {
	t.Helper()
	opts := natsbus.DefaultOptions()
	opts.StoreDir = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	inner, err := natsbus.Connect(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	b := Wrap(inner, seed)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// counter counts deliveries per payload.
type counter struct {
	mu  sync.Mutex
	got map[string]int
	at  map[string]time.Time
}

func subscribe(t *testing.T, b *Bus, subject string) *counter {
	t.Helper()
	c := &counter{got: map[string]int{}, at: map[string]time.Time{}}
	if _, err := b.Subscribe(subject, func(m *transport.Msg) {
		c.mu.Lock()
		c.got[string(m.Data)]++
		c.at[string(m.Data)] = time.Now()
		c.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *counter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.got {
		n += v
	}
	return n
}

// waitFor polls until cond holds or 5 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func publish(t *testing.T, b *Bus, subject string, n int) {
	t.Helper()
	for i := range n {
		if err := b.Publish(context.Background(), subject, fmt.Appendf(nil, "%s-%d", subject, i)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDropOnlyMatchingSubjects(t *testing.T) {
	b := embedded(t, 1)
	if err := b.SetRules(Rule{Subject: "run.*.lossy", Drop: 1}); err != nil {
		t.Fatal(err)
	}
	lossy, clean := subscribe(t, b, "run.a.lossy"), subscribe(t, b, "run.a.clean")
	publish(t, b, "run.a.lossy", 10)
	publish(t, b, "run.a.clean", 10)
	waitFor(t, "the clean subject", func() bool { return clean.total() == 10 })
	// The clean messages were published after the lossy ones on the same
	// connection, so NATS has delivered every lossy one that was sent.
	if n := lossy.total(); n != 0 {
		t.Fatalf("%d dropped messages arrived", n)
	}
	if s := b.Stats(); s.Dropped != 10 || s.Published != 20 {
		t.Fatalf("stats %+v", s)
	}
}

func TestDuplicate(t *testing.T) {
	b := embedded(t, 1)
	if err := b.SetRules(Rule{Subject: ">", Duplicate: 1}); err != nil {
		t.Fatal(err)
	}
	c := subscribe(t, b, "dup")
	publish(t, b, "dup", 5)
	waitFor(t, "duplicates", func() bool { return c.total() == 10 })
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, v := range c.got {
		if v != 2 {
			t.Errorf("%s delivered %d times", k, v)
		}
	}
}

func TestDelay(t *testing.T) {
	b := embedded(t, 1)
	const d = 200 * time.Millisecond
	if err := b.SetRules(Rule{Subject: "slow", Delay: d}); err != nil {
		t.Fatal(err)
	}
	c := subscribe(t, b, "slow")
	start := time.Now()
	publish(t, b, "slow", 1)
	waitFor(t, "the delayed message", func() bool { return c.total() == 1 })
	c.mu.Lock()
	got := c.at["slow-0"].Sub(start)
	c.mu.Unlock()
	if got < d {
		t.Fatalf("delivered after %v, want ≥ %v", got, d)
	}
	if s := b.Stats(); s.Delayed != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// The same seed and the same publishes give the same faults.
func TestSeededDropsRepeat(t *testing.T) {
	pattern := func(seed int64) []int64 {
		b := Wrap(nopBus{}, seed)
		if err := b.SetRules(Rule{Subject: ">", Drop: 0.5}); err != nil {
			t.Fatal(err)
		}
		var dropped []int64
		for i := range 64 {
			before := b.Stats().Dropped
			_ = b.Publish(context.Background(), "x", nil)
			if b.Stats().Dropped > before {
				dropped = append(dropped, int64(i))
			}
		}
		return dropped
	}
	a, a2, c := pattern(7), pattern(7), pattern(8)
	if fmt.Sprint(a) != fmt.Sprint(a2) {
		t.Fatal("same seed, different drops")
	}
	if fmt.Sprint(a) == fmt.Sprint(c) || len(a) == 0 || len(a) == 64 {
		t.Fatalf("drops %v vs %v: the probability is not applied", a, c)
	}
}

func TestCloseCancelsDelayed(t *testing.T) {
	b := embedded(t, 1)
	if err := b.SetRules(Rule{Subject: ">", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	publish(t, b, "late", 3)
	done := make(chan error, 1)
	go func() { done <- b.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for hour-long delays")
	}
}

func TestBadRules(t *testing.T) {
	b := Wrap(nopBus{}, 1)
	for _, r := range []Rule{{Subject: "a..b"}, {Subject: "a", Drop: 2}, {Subject: "a", Duplicate: -1}, {Subject: "a", Delay: -1}} {
		if err := b.SetRules(r); !errors.Is(err, ErrRule) {
			t.Errorf("%+v: %v", r, err)
		}
	}
}

// nopBus is a transport.Bus that accepts everything and delivers nothing,
// for the pure bookkeeping tests.
type nopBus struct{ transport.Bus }

func (nopBus) Publish(context.Context, string, []byte) error { return nil }
func (nopBus) Close() error                                  { return nil }
