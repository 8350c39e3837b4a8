package actors

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/memhub"
)

// A message that always panics the core is redelivered by the durable
// stream (it is never acked), each redelivery fails again, and the failure
// budget turns the loop into an escalation instead of a crash loop. Messages
// stepped before it are acked exactly once.
func TestPoisonStreamMessageEndsInEscalation(t *testing.T) {
	hub := memhub.New(1)
	bus := hub.Connect("node-a")
	defer bus.Close()
	ctx := context.Background()
	st, err := bus.Stream(ctx, transport.StreamConfig{Name: "POISON", Subjects: []string{"asyncrl.t.in"}, Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	escalated := make(chan error, 1)
	h := newHarness(t)
	cfg := DefaultShellConfig("poisoned", "test")
	cfg.Supervision = supCfg() // MaxFailures 3
	cfg.OnEscalate = func(_ string, err error) { escalated <- err }
	sh, rec, _ := spawnCounter(t, h, cfg, 1000)
	if _, err := BridgeStream(ctx, st, "c", time.Second, decodeCmsg, sh); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"1", "p2"} {
		if _, err := st.Publish(ctx, "asyncrl.t.in", []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	hub.Drain()
	for failure := 1; failure <= 2; failure++ {
		eventually(t, "restart scheduled", func() bool { return len(h.clock.Pending()) == 1 })
		h.clock.Advance(h.clock.Pending()[0].Sub(h.clock.Now()))
		eventually(t, "restarted", func() bool { return sh.Incarnations() == failure+1 })
		hub.Advance(time.Second) // ack wait: the poison message comes back
	}
	select {
	case err := <-escalated:
		if !errors.Is(err, ErrEscalated) || !errors.Is(err, ErrPanic) {
			t.Fatalf("escalation error %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no escalation")
	}
	<-sh.Done()
	hub.Advance(10 * time.Second) // the good message must not come back
	if s, _, _, _ := rec.snapshot(); fmt.Sprint(s) != "[1]" {
		t.Fatalf("steps %v: the acked message was redelivered or lost", s)
	}
}

// A message a full mailbox refused comes back after refusedDelay of the
// hub's virtual time, long before AckWait (30 s here, the sampling
// filter's), and is stepped once.
func TestBridgeStreamRefusedComesBackBeforeAckWait(t *testing.T) {
	hub := memhub.New(1)
	bus := hub.Connect("node-a")
	defer bus.Close()
	ctx := context.Background()
	st, err := bus.Stream(ctx, transport.StreamConfig{Name: "FULL", Subjects: []string{"asyncrl.t.in"}, Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	cfg := DefaultShellConfig("full", "test")
	cfg.MailboxCapacity = 1
	sh, rec, _ := spawnCounter(t, h, cfg, 1000)
	if _, err := BridgeStream(ctx, st, "c", 30*time.Second, decodeCmsg, sh); err != nil {
		t.Fatal(err)
	}
	if err := sh.Tell(cmsg{N: 0, Block: true}); err != nil {
		t.Fatal(err)
	}
	<-rec.entered
	for _, p := range []string{"1", "2"} { // 1 fills the mailbox, 2 is refused
		if _, err := st.Publish(ctx, "asyncrl.t.in", []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	hub.Drain()
	close(rec.gate)
	eventually(t, "0 and 1 stepped", func() bool { s, _, _, _ := rec.snapshot(); return len(s) == 2 })
	hub.Advance(refusedDelayBase - time.Millisecond)
	if s, _, _, _ := rec.snapshot(); len(s) != 2 {
		t.Fatalf("steps %v: the refused message came back before its delay", s)
	}
	hub.Advance(time.Millisecond)
	eventually(t, "2 stepped after the delay", func() bool { s, _, _, _ := rec.snapshot(); return len(s) == 3 })
	hub.Advance(time.Minute) // past AckWait: nothing comes back twice
	if s, _, _, _ := rec.snapshot(); fmt.Sprint(s) != "[0 1 2]" {
		t.Fatalf("steps %v", s)
	}
}
