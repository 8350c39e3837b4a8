package actors

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/memhub"
)

// Overload through a subject bridge slows admission and loses nothing
// (issue 22: the controller's 1,024-message mailbox refused 2,152 groups'
// messages at 131,072 trajectories in flight).

const floodCap = 4

// floodShell spawns a counter shell with a mailbox of floodCap whose core
// is parked inside its first message (N -1) until rec.gate is closed.
func floodShell(t *testing.T, h *harness, name string) (*Shell[cmsg, cout], *recorder) {
	t.Helper()
	cfg := DefaultShellConfig(name, "test")
	cfg.MailboxCapacity = floodCap
	sh, rec, _ := spawnCounter(t, h, cfg, 1<<30)
	if err := sh.Tell(cmsg{N: -1, Block: true}); err != nil {
		t.Fatal(err)
	}
	<-rec.entered
	return sh, rec
}

func (h *harness) waits(name string) float64 {
	return testutil.ToFloat64(h.sys.metrics.waits.WithLabelValues(name))
}

func (h *harness) waitSeconds(name string) float64 {
	return testutil.ToFloat64(h.sys.metrics.waitSeconds.WithLabelValues(name))
}

func (h *harness) drops(name string) float64 {
	return testutil.ToFloat64(h.sys.metrics.dropped.WithLabelValues(name))
}

// floodAndRelease bridges subject on bus to a flood shell named name,
// publishes n messages while its core is parked, checks that the bridge
// handler waits for room, opens the gate and checks that every message
// was stepped, in order, none dropped. then, when set, runs after the
// publishes (memhub: the driver that delivers them).
func floodAndRelease(t *testing.T, bus transport.Bus, subject, name string, n int, then func()) {
	t.Helper()
	h := newHarness(t)
	sh, rec := floodShell(t, h, name)
	if _, err := BridgeSubject(bus, subject, "", decodeCmsg, sh); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range n {
		if err := bus.Publish(ctx, subject, []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	if then != nil {
		then()
	}
	eventually(t, "a bridge handler waiting for room", func() bool { return h.waits(name) >= 1 })
	close(rec.gate)
	eventually(t, "every message stepped", func() bool { s, _, _, _ := rec.snapshot(); return len(s) == n+1 })
	steps, _, _, _ := rec.snapshot()
	for i, s := range steps[1:] {
		if s != i {
			t.Fatalf("step %d is message %d: reordered or lost (%v)", i, s, steps)
		}
	}
	if d := h.drops(name); d != 0 {
		t.Fatalf("%v messages dropped", d)
	}
	if h.waitSeconds(name) <= 0 {
		t.Fatal("no wait time recorded")
	}
	if got := h.logs.count("bridge waits for room"); got != 1 {
		t.Fatalf("%d wait warnings, want 1 (rate-limited)", got)
	}
}

// memhub, driven: the driver's goroutine runs the handler, which waits.
func TestBridgeWaitsForRoomMemhub(t *testing.T) {
	hub := memhub.New(1)
	bus := hub.Connect("node-a")
	defer bus.Close()
	n := 50 * floodCap
	drained := make(chan int, 1)
	floodAndRelease(t, bus, "asyncrl.t.in", "flood-mem", n, func() { go func() { drained <- hub.Drain() }() })
	if got := <-drained; got != n {
		t.Fatalf("hub delivered %d of %d", got, n)
	}
}

// Real NATS: nats.go's per-subscription goroutine waits; the backlog stays
// in the client's pending buffer.
func TestBridgeWaitsForRoomNATS(t *testing.T) {
	bus := natsBus(t)
	floodAndRelease(t, bus, "asyncrl.test.flood", "flood-nats", 100*floodCap, nil)
	if d := bus.SlowConsumerDrops(); d != 0 {
		t.Fatalf("NATS dropped %d messages", d)
	}
}

// Stopping the shell releases a handler waiting for room at once, even
// though the core is still busy: the driver returns, nothing leaks.
func TestShellStopReleasesWaitingBridge(t *testing.T) {
	h := newHarness(t)
	hub := memhub.New(1)
	bus := hub.Connect("node-a")
	defer bus.Close()
	sh, rec := floodShell(t, h, "stop-wait")
	if _, err := BridgeSubject(bus, "asyncrl.t.in", "", decodeCmsg, sh); err != nil {
		t.Fatal(err)
	}
	for i := range 3 * floodCap {
		_ = bus.Publish(context.Background(), "asyncrl.t.in", []byte(strconv.Itoa(i)))
	}
	drained := make(chan struct{})
	go func() { hub.Drain(); close(drained) }()
	eventually(t, "a handler waiting", func() bool { return h.waits("stop-wait") == 1 })
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stopped <- sh.Stop(ctx)
	}()
	select {
	case <-drained: // the waiting handler gave up; later deliveries see no subscriber
	case <-time.After(5 * time.Second):
		t.Fatal("the handler still waits after Stop began")
	}
	close(rec.gate)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	// The messages accepted before Stop were stepped.
	if s, _, _, _ := rec.snapshot(); len(s) != 1+floodCap {
		t.Fatalf("steps %v, want the parked one and the %d accepted", s, floodCap)
	}
}

// Stopping the bridge alone releases its waiting handler (NATS).
func TestBridgeStopReleasesWaitingHandler(t *testing.T) {
	bus := natsBus(t)
	h := newHarness(t)
	sh, rec := floodShell(t, h, "bridge-stop")
	b, err := BridgeSubject(bus, "asyncrl.test.bstop", "", decodeCmsg, sh)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 * floodCap {
		_ = bus.Publish(context.Background(), "asyncrl.test.bstop", []byte(strconv.Itoa(i)))
	}
	eventually(t, "a handler waiting", func() bool { return h.waits("bridge-stop") == 1 })
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	// The wait time is recorded when the wait ends; the core is still parked,
	// so only the bridge's stop can have ended it.
	eventually(t, "the wait to end", func() bool { return h.waitSeconds("bridge-stop") > 0 })
	close(rec.gate)
}

// memhub in auto mode runs handlers inside Publish. A core that publishes to
// its own bridged subject would, if its bridge waited for room, wait for
// itself: the bridge sees Msg.Inline and admits over the bound instead.
func TestInlineSelfPublishCannotDeadlock(t *testing.T) {
	h := newHarness(t)
	hub := memhub.New(1)
	hub.SetAuto(true)
	bus := hub.Connect("node-a")
	defer bus.Close()
	const fanout, limit = 4, 80
	var published atomic.Int64
	// Every step sends once; the sender turns each send into fanout
	// messages on the shell's own subject until limit are out.
	sender := SenderFunc[cout](func(ctx context.Context, _ string, _ cout) error {
		for range fanout {
			k := published.Add(1)
			if k > limit {
				return nil
			}
			if err := bus.Publish(ctx, "asyncrl.t.self", []byte(strconv.FormatInt(k, 10))); err != nil {
				return err
			}
		}
		return nil
	})
	rec := newRecorder()
	cfg := DefaultShellConfig("self", "test")
	cfg.MailboxCapacity = 2
	sh, err := Spawn(h.sys, cfg, counterFactory(rec, 1), Sender[cout](sender))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := BridgeSubject(bus, "asyncrl.t.self", "", decodeCmsg, sh); err != nil {
		t.Fatal(err)
	}
	if err := bus.Publish(context.Background(), "asyncrl.t.self", []byte("0")); err != nil {
		t.Fatal(err)
	}
	eventually(t, fmt.Sprintf("%d steps", limit+1), func() bool { s, _, _, _ := rec.snapshot(); return len(s) == limit+1 })
	if got := testutil.ToFloat64(h.sys.metrics.overflow.WithLabelValues("self")); got == 0 {
		t.Fatal("no message was admitted over the bound: the test did not fill the mailbox")
	}
	if d := h.drops("self"); d != 0 {
		t.Fatalf("%v dropped", d)
	}
}
