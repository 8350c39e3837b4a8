package lease_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/asyncrl/asyncrl/chaos/faultproxy"
	"github.com/asyncrl/asyncrl/cluster/lease"
	"github.com/asyncrl/asyncrl/cluster/lease/contender"
)

// TestHungRenewalReportsLossByTheDeadline: a holder whose renewal hangs
// (packets vanish: a blackholed link, not a refused connection) learns it
// lost the term at its local deadline, while the server's key is still
// its own — not when the call gives up. The core is ticked only between
// calls, so with a CallTimeout past the deadline the loss used to be
// reported CallTimeout after the renewal was sent, by when the server
// may have let the key expire and a standby may lead. Here CallTimeout
// is twice the TTL: the old elector reports ~6.5 s after the last
// confirmed renewal, the key expires at 3 s, the deadline is at 2 s.
func TestHungRenewalReportsLossByTheDeadline(t *testing.T) {
	b := startBus(t)
	p, err := faultproxy.Listen("127.0.0.1:0", strings.TrimPrefix(b.ClientURL(), "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	nc, err := nats.Connect("nats://" + p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	defer func() { _ = p.Set(faultproxy.Fault{Kind: faultproxy.Pass}) }()

	tm := contender.Timing{TTL: 3 * time.Second, RenewInterval: 500 * time.Millisecond, Margin: time.Second,
		RetryMin: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond}
	var mu sync.Mutex
	var lostAt time.Time
	cfg := lease.DefaultConfig("trainer", "a")
	cfg.Timing, cfg.CallTimeout = tm, 2*tm.TTL
	cfg.OnChange = func(st contender.Status) {
		mu.Lock()
		defer mu.Unlock()
		if !st.Leader && lostAt.IsZero() {
			lostAt = time.Now()
		}
	}
	ctx := context.Background()
	e, err := lease.New(ctx, nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Now() // before the acquiring Create left: the server's TTL runs from later
	st, _ := e.Tick(ctx)
	if !st.Leader {
		t.Fatal("a did not acquire")
	}
	if err := p.Set(faultproxy.Fault{Kind: faultproxy.Blackhole}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(tm.RenewInterval)
	st, _ = e.Tick(ctx) // the renewal hangs
	returned := time.Now()
	if st.Leader {
		t.Fatalf("still leader after a renewal that never answered: %+v", st)
	}
	mu.Lock()
	defer mu.Unlock()
	if lostAt.IsZero() {
		t.Fatal("the loss was not reported")
	}
	if expiry := sent.Add(tm.TTL); !lostAt.Before(expiry) {
		t.Fatalf("loss reported %s after the last confirmed write (Tick returned at %s), at or after the key can expire (TTL %s): a standby may already lead",
			lostAt.Sub(sent), returned.Sub(sent), tm.TTL)
	}
	if s := p.Stats(); s.Held == 0 {
		t.Fatalf("the blackhole held nothing (%+v): the renewal did not hang", s)
	}
}
