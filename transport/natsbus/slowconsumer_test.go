package natsbus_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/internal/syncbuf"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// A handler that falls behind past the subscription's pending limits loses
// messages in nats.go; natsbus counts every one of them (also after the
// subscription is gone) and logs the episode once (rate-limited).
func TestSlowConsumerDropsCountedAndLogged(t *testing.T) {
	logs := &syncbuf.Buffer{}
	b := embedded(t, func(o *natsbus.Options) {
		o.PendingMsgs = 4
		o.Logger = zerolog.New(logs)
	})
	defer b.Close()
	gate := make(chan struct{})
	got := make(chan struct{}, 100)
	sub, err := b.Subscribe("asyncrl.t.slow", func(*transport.Msg) {
		<-gate
		got <- struct{}{}
	})
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	ctx := context.Background()
	for range n {
		if err := b.Publish(ctx, "asyncrl.t.slow", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	// One message is in the handler, about PendingMsgs wait; the rest are
	// dropped.
	for b.SlowConsumerDrops() < n-10 {
		if time.Now().After(deadline) {
			t.Fatalf("%d drops counted, want about %d", b.SlowConsumerDrops(), n-5)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(gate)
	// Every message was either handled or counted as dropped.
	handled := int64(0)
	for handled+b.SlowConsumerDrops() < n {
		select {
		case <-got:
			handled++
		case <-time.After(time.Until(deadline)):
			t.Fatalf("%d handled + %d dropped of %d", handled, b.SlowConsumerDrops(), n)
		}
	}
	drops := b.SlowConsumerDrops()
	if handled+drops != n || handled > 8 {
		t.Fatalf("%d handled + %d dropped, want %d with at most 8 handled", handled, drops, n)
	}
	if v := testutil.ToFloat64(b.Collectors()[0]); v != float64(drops) {
		t.Fatalf("asyncrl_bus_slow_consumer_dropped_total %v, want %d", v, drops)
	}
	for time.Now().Before(deadline) && !strings.Contains(logs.String(), "slow consumer") {
		time.Sleep(5 * time.Millisecond)
	}
	if k := strings.Count(logs.String(), "slow consumer"); k != 1 {
		t.Fatalf("%d slow-consumer lines, want 1:\n%s", k, logs.String())
	}
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if d := b.SlowConsumerDrops(); d != drops {
		t.Fatalf("%d drops after unsubscribe, want %d kept", d, drops)
	}
}
