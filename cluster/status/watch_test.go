package status

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// On a bus where no node of the run ever started, the watcher reports
// each missing bucket as a problem, creates nothing (it only reads), and
// still follows a term announced on the bus.
func TestWatcherReadsOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bus, err := natsbus.Connect(ctx, natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = bus.Close() }()
	w, err := NewWatcher(bus.Conn(), "r1", time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Poll(ctx)
	s := w.Snapshot()
	got := strings.Join(s.Problems, "\n")
	for _, want := range []string{"members: bucket asyncrl_names does not exist", "lease: bucket asyncrl_leases does not exist",
		"progress: bucket asyncrl_r1_progress does not exist"} {
		if !strings.Contains(got, want) {
			t.Errorf("problems lack %q:\n%s", want, got)
		}
	}
	js, err := jetstream.New(bus.Conn())
	if err != nil {
		t.Fatal(err)
	}
	names := js.StreamNames(ctx)
	for n := range names.Name() {
		t.Errorf("the watcher created stream %s", n)
	}

	// A term announced on the base plan is followed: its engine's
	// announcement on the term's plan reaches the view.
	plan := transport.MustPlan("r1")
	term := transport.MustPlan("r1-t3")
	engSubj, err := term.Engine("e0", transport.EngineHealth)
	if err != nil {
		t.Fatal(err)
	}
	announce, _ := messages.Encode(messages.TermAnnounce{Header: messages.Header{RunID: "r1", Sender: "n1"}, Term: "r1-t3", Token: 3})
	health, _ := messages.Encode(messages.EngineHealth{Header: messages.Header{RunID: "r1-t3", Sender: "n2", Version: 4}, Engine: "e0", Healthy: true})
	deadline := time.Now().Add(10 * time.Second)
	for {
		// Both are periodic in a cluster; resend until the watcher has
		// subscribed to the term and seen the engine.
		if err := bus.Publish(ctx, plan.TermAnnounce, announce); err != nil {
			t.Fatal(err)
		}
		if err := bus.Publish(ctx, engSubj, health); err != nil {
			t.Fatal(err)
		}
		s = w.Snapshot()
		if s.Term != nil && len(s.Engines) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("term %+v, engines %+v after 10s", s.Term, s.Engines)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if s.Term.ID != "r1-t3" || s.Term.Holder != "n1" || s.Engines[0].Serving != 4 || s.Engines[0].Node != "n2" || !s.Engines[0].Healthy {
		t.Errorf("term %+v, engine %+v", s.Term, s.Engines[0])
	}
}
