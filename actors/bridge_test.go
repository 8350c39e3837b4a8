package actors

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestBridgeSubjectDecodesAndCountsGarbage(t *testing.T) {
	h := newHarness(t)
	bus := newFakeBus()
	sh, rec, _ := spawnCounter(t, h, DefaultShellConfig("bridged", "test"), 1000)
	b, err := BridgeSubject(bus, "in.cmd", "", decodeCmsg, sh)
	if err != nil {
		t.Fatal(err)
	}
	if b.Subject() != "in.cmd" {
		t.Fatal(b.Subject())
	}
	ctx := context.Background()
	for _, p := range []string{"1", "x", "2", "", "3", "zz"} {
		_ = bus.Publish(ctx, "in.cmd", []byte(p))
	}
	_ = bus.Publish(ctx, "other", []byte("99"))
	eventually(t, "3 decoded steps", func() bool { s, _, _, _ := rec.snapshot(); return len(s) == 3 })
	steps, _, _, _ := rec.snapshot()
	if fmt.Sprint(steps) != "[1 2 3]" {
		t.Fatalf("steps %v", steps)
	}
	if got := testutil.ToFloat64(h.sys.metrics.decodeErr.WithLabelValues("bridged", "in.cmd")); got != 3 {
		t.Fatalf("decode errors %v, want 3", got)
	}
	if got := h.logs.count("undecodable payload dropped"); got != 1 {
		t.Fatalf("decode warnings %d, want 1 (rate-limited)", got)
	}
	// After the interval the next one is logged with the count held back.
	h.clock.Advance(11 * time.Second)
	_ = bus.Publish(ctx, "in.cmd", []byte("bad"))
	if got := h.logs.count(`"suppressed":2,"error":"strconv.Atoi: parsing \"bad\"`); got != 1 {
		t.Fatalf("want a line reporting 2 suppressed:\n%s", h.logs.String())
	}
	if sh.Incarnations() != 1 {
		t.Fatal("garbage restarted the actor")
	}
	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := sh.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	if n := bus.subscriptions(); n != 0 {
		t.Fatalf("%d subscriptions left after stop", n)
	}
	if err := b.Stop(); err != nil {
		t.Fatalf("second bridge stop: %v", err)
	}
}

func TestBridgeQueueSubscription(t *testing.T) {
	h := newHarness(t)
	bus := newFakeBus()
	sh1, rec1, _ := spawnCounter(t, h, DefaultShellConfig("q1", "test"), 1000)
	if _, err := BridgeSubject(bus, "work", "workers", decodeCmsg, sh1); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		_ = bus.Publish(context.Background(), "work", []byte(fmt.Sprint(i)))
	}
	eventually(t, "queue delivery", func() bool { s, _, _, _ := rec1.snapshot(); return len(s) == 10 })
	bus.mu.Lock()
	q := bus.subs[0].queue
	bus.mu.Unlock()
	if q != "workers" {
		t.Fatalf("subscribed with queue %q, want workers", q)
	}
}

func TestBridgeToStoppedShellFails(t *testing.T) {
	h := newHarness(t)
	bus := newFakeBus()
	sh, _, _ := spawnCounter(t, h, DefaultShellConfig("gone", "test"), 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = sh.Stop(ctx)
	if _, err := BridgeSubject(bus, "x", "", decodeCmsg, sh); !errors.Is(err, ErrStopped) {
		t.Fatalf("got %v", err)
	}
	if bus.subscriptions() != 0 {
		t.Fatal("subscription leaked")
	}
}

func TestBridgeStreamAcksAfterStep(t *testing.T) {
	h := newHarness(t)
	cfg := DefaultShellConfig("durable", "test")
	cfg.Supervision = supCfg()
	sh, rec, _ := spawnCounter(t, h, cfg, 1000)
	st := newFakeStream()
	ctx := context.Background()
	if _, err := BridgeStream(ctx, st, "c1", time.Second, decodeCmsg, sh); err != nil {
		t.Fatal(err)
	}
	_, _ = st.Publish(ctx, "s.in", []byte("1"))    // seq 1: stepped, acked
	_, _ = st.Publish(ctx, "s.in", []byte("junk")) // seq 2: undecodable, acked
	_, _ = st.Publish(ctx, "s.in", []byte("p3"))   // seq 3: panics, not acked
	eventually(t, "seq 1 acked", func() bool { return st.isAcked(1) })
	if !st.isAcked(2) {
		t.Fatal("undecodable message must be acked (redelivery cannot help)")
	}
	eventually(t, "restart scheduled", func() bool { return len(h.clock.Pending()) == 1 })
	if st.isAcked(3) {
		t.Fatal("a message whose step panicked was acked")
	}
	if got := testutil.ToFloat64(h.sys.metrics.decodeErr.WithLabelValues("durable", "S/c1")); got != 1 {
		t.Fatalf("decode errors %v", got)
	}
	h.clock.Advance(100 * time.Millisecond)
	eventually(t, "restarted", func() bool { return sh.Incarnations() == 2 })
	if s, _, _, _ := rec.snapshot(); fmt.Sprint(s) != "[1]" {
		t.Fatalf("steps %v", s)
	}
}

func TestBridgeStreamRefusesWithDelay(t *testing.T) {
	h := newHarness(t)
	cfg := DefaultShellConfig("durable-full", "test")
	cfg.MailboxCapacity = 1
	sh, rec, _ := spawnCounter(t, h, cfg, 1000)
	st := newFakeStream()
	ctx := context.Background()
	if _, err := BridgeStream(ctx, st, "c1", time.Second, decodeCmsg, sh); err != nil {
		t.Fatal(err)
	}
	if err := sh.Tell(cmsg{N: 0, Block: true}); err != nil {
		t.Fatal(err)
	}
	<-rec.entered
	_, _ = st.Publish(ctx, "s.in", []byte("1")) // accepted (fills the mailbox)
	_, _ = st.Publish(ctx, "s.in", []byte("2")) // refused: left unacked
	close(rec.gate)
	eventually(t, "seq 1 acked", func() bool { return st.isAcked(1) })
	if st.isAcked(2) {
		t.Fatal("refused message was acked: it would be lost")
	}
	// Refused with a short delay (first delivery: 50 ms), not left for
	// AckWait (1 s here).
	if got := st.nakked(); len(got) != 1 || got[0] != (fakeNak{2, refusedDelayBase}) {
		t.Fatalf("naks %+v, want seq 2 with %v", got, refusedDelayBase)
	}
	st.redeliver() // what the stream does after the delay
	eventually(t, "seq 2 acked after redelivery", func() bool { return st.isAcked(2) })
	if s, _, _, _ := rec.snapshot(); fmt.Sprint(s) != "[0 1 2]" {
		t.Fatalf("steps %v", s)
	}
}

func TestBusSenderPublishesEncodedSends(t *testing.T) {
	h := newHarness(t)
	bus := newFakeBus()
	rec := newRecorder()
	sh, err := Spawn(h.sys, DefaultShellConfig("pub", "test"), counterFactory(rec, 2),
		Sender[cout](BusSender[cout]{Bus: bus, Encode: encodeCout}))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		_ = sh.Tell(cmsg{N: i})
	}
	eventually(t, "two publishes", func() bool { return len(bus.published()) == 2 })
	got := bus.published()
	if got[0].Subject != "out.batch" || string(got[0].Data) != "batch:2" || string(got[1].Data) != "batch:4" {
		t.Fatalf("published %+v", got)
	}
}

func TestStreamSenderStores(t *testing.T) {
	st := newFakeStream()
	s := StreamSender[cout]{Stream: st, Encode: encodeCout}
	if err := s.Send(context.Background(), "s.out", cout{Kind: "k", Count: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.Send(context.Background(), "s.out", cout{}); err == nil {
		t.Fatal("encode error not returned")
	}
	if len(st.msgs) != 1 || string(st.msgs[0]) != "k:1" {
		t.Fatalf("stored %q", st.msgs)
	}
}

// A refused message comes back sooner than AckWait, later with each
// refusal, and never later than AckWait.
func TestRefusedDelayBacksOff(t *testing.T) {
	for _, c := range []struct {
		delivered uint64
		ackWait   time.Duration
		want      time.Duration
	}{
		{0, time.Minute, 50 * time.Millisecond},
		{1, time.Minute, 50 * time.Millisecond},
		{2, time.Minute, 100 * time.Millisecond},
		{5, time.Minute, 800 * time.Millisecond},
		{11, time.Minute, 51200 * time.Millisecond},
		{12, time.Minute, time.Minute},
		{1 << 40, time.Minute, time.Minute},
		{3, 0, 200 * time.Millisecond},
		{30, 0, 30 * time.Second},
		{1, 10 * time.Millisecond, 10 * time.Millisecond},
	} {
		if got := refusedDelay(c.delivered, c.ackWait); got != c.want {
			t.Errorf("refusedDelay(%d, %v) = %v, want %v", c.delivered, c.ackWait, got, c.want)
		}
	}
}
