package actors

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Integration against a real embedded NATS server (random loopback port,
// temp store): the bridges and senders work over the production Bus.

func natsBus(t *testing.T) *natsbus.Bus {
	t.Helper()
	if testing.Short() {
		t.Skip("embedded NATS in -short mode")
	}
	opts := natsbus.DefaultOptions()
	opts.StoreDir = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := natsbus.Connect(ctx, opts)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func TestNATSQueueBridgeAndBusSender(t *testing.T) {
	bus := natsBus(t)
	h := newHarness(t)
	rec := newRecorder()
	// The core sends on "out.batch"; route it under a test prefix.
	pub := BusSender[cout]{Bus: bus, Encode: encodeCout}
	sender := SenderFunc[cout](func(ctx context.Context, subject string, msg cout) error {
		return pub.Send(ctx, "asyncrl.test."+subject, msg)
	})
	sh, err := Spawn(h.sys, DefaultShellConfig("nats-counter", "test"), counterFactory(rec, 2), Sender[cout](sender))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var outs []string
	sub, err := bus.Subscribe("asyncrl.test.out.>", func(m *transport.Msg) {
		mu.Lock()
		outs = append(outs, m.Subject+"="+string(m.Data))
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if _, err := BridgeSubject(bus, "asyncrl.test.in", "counters", decodeCmsg, sh); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, p := range []string{"1", "garbage", "2", "3", "4"} {
		if err := bus.Publish(ctx, "asyncrl.test.in", []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "4 steps", func() bool { s, _, _, _ := rec.snapshot(); return len(s) == 4 })
	eventually(t, "2 outputs", func() bool { mu.Lock(); defer mu.Unlock(); return len(outs) == 2 })
	mu.Lock()
	got := fmt.Sprint(outs)
	mu.Unlock()
	if got != "[asyncrl.test.out.batch=batch:2 asyncrl.test.out.batch=batch:4]" {
		t.Fatalf("outputs %s", got)
	}
	if v := testutil.ToFloat64(h.sys.metrics.decodeErr.WithLabelValues("nats-counter", "asyncrl.test.in")); v != 1 {
		t.Fatalf("decode errors %v", v)
	}
}

func TestNATSStreamBridgeResumesDurable(t *testing.T) {
	bus := natsBus(t)
	h := newHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := bus.Stream(ctx, transport.StreamConfig{Name: "ACTORS_T", Subjects: []string{"asyncrl.test.durable"}, Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	run := func(name string, from, to int) *Shell[cmsg, cout] {
		sh, err := Spawn(h.sys, DefaultShellConfig(name, "test"), counterFactory(rec, 1000), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := BridgeStream(ctx, st, "consumer", 5*time.Second, decodeCmsg, sh); err != nil {
			t.Fatal(err)
		}
		for i := from; i < to; i++ {
			if _, err := st.Publish(ctx, "asyncrl.test.durable", []byte(fmt.Sprint(i))); err != nil {
				t.Fatal(err)
			}
		}
		return sh
	}
	sh1 := run("durable-1", 0, 5)
	eventually(t, "first 5", func() bool { s, _, _, _ := rec.snapshot(); return len(s) == 5 })
	if err := sh1.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// A new incarnation on the same durable gets only what was not acked.
	sh2 := run("durable-2", 5, 8)
	eventually(t, "next 3", func() bool { s, _, _, _ := rec.snapshot(); return len(s) == 8 })
	if err := sh2.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if s, _, _, _ := rec.snapshot(); fmt.Sprint(s) != "[0 1 2 3 4 5 6 7]" {
		t.Fatalf("steps %v: acked messages redelivered or lost", s)
	}
}
