package natsbus_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/bustest"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// streamState reads a stream's retention and message count.
func streamState(t *testing.T, b *natsbus.Bus, name string) (jetstream.RetentionPolicy, uint64) {
	t.Helper()
	js, err := jetstream.New(b.Conn())
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	info := s.CachedInfo()
	return info.Config.Retention, info.State.Msgs
}

// A WorkQueue stream is JetStream's work queue: acked messages are
// deleted. Opening, with WorkQueue, a stream that already exists with
// limits retention (an older asyncrl's, servers still up) keeps it as it
// is instead of failing: JetStream cannot change retention to work-queue.
func TestStreamWorkQueueDeletesAcked(t *testing.T) {
	ctx := context.Background()
	b, err := natsbus.Connect(ctx, natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cfg := transport.StreamConfig{Name: "groups-wq", Subjects: []string{"asyncrl.wq.groups"}, Memory: true, MaxAge: time.Hour, WorkQueue: true}
	st, err := b.Stream(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := st.Publish(ctx, "asyncrl.wq.groups", []byte("group")); err != nil {
			t.Fatal(err)
		}
	}
	sub, err := st.Consume(ctx, "sampling", time.Minute, func(m *transport.StreamMsg) { _ = m.Ack() })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	bustest.Eventually(t, 10*time.Second, "acked groups deleted", func() bool {
		_, n := streamState(t, b, cfg.Name)
		return n == 0
	})
	if r, _ := streamState(t, b, cfg.Name); r != jetstream.WorkQueuePolicy {
		t.Fatalf("retention %v; want work queue", r)
	}

	old := transport.StreamConfig{Name: "groups-old", Subjects: []string{"asyncrl.old.groups"}, Memory: true, MaxAge: time.Hour}
	if _, err := b.Stream(ctx, old); err != nil {
		t.Fatal(err)
	}
	old.WorkQueue = true
	if _, err := b.Stream(ctx, old); err != nil {
		t.Fatalf("reopening a limits stream with WorkQueue: %v", err)
	}
	if r, _ := streamState(t, b, old.Name); r != jetstream.LimitsPolicy {
		t.Fatalf("retention %v after reopening; want the stream's own (limits)", r)
	}
}

// Duplicates sets the stream's duplicate window: a message id is
// remembered for that long (the server keeps it in memory), 0 keeps
// JetStream's default of 2 minutes; a negative window is refused.
func TestStreamDuplicatesWindow(t *testing.T) {
	ctx := context.Background()
	b, err := natsbus.Connect(ctx, natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	js, err := jetstream.New(b.Conn())
	if err != nil {
		t.Fatal(err)
	}
	window := func(name string) time.Duration {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().Config.Duplicates
	}
	if _, err := b.Stream(ctx, transport.StreamConfig{Name: "dup-default", Subjects: []string{"asyncrl.dup.a"}, Memory: true}); err != nil {
		t.Fatal(err)
	}
	if w := window("dup-default"); w != 2*time.Minute {
		t.Errorf("default window %v, want 2m", w)
	}
	st, err := b.Stream(ctx, transport.StreamConfig{Name: "dup-short", Subjects: []string{"asyncrl.dup.b"}, Memory: true, Duplicates: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if w := window("dup-short"); w != 3*time.Second {
		t.Errorf("window %v, want 3s", w)
	}
	p := st.(interface {
		PublishMsgID(ctx context.Context, subject, id string, data []byte) (uint64, error)
	})
	a, err := p.PublishMsgID(ctx, "asyncrl.dup.b", "g1", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if again, err := p.PublishMsgID(ctx, "asyncrl.dup.b", "g1", []byte("x")); err != nil || again != a {
		t.Errorf("a repeat within the window stored as %d (%v), want the first's %d", again, err, a)
	}
	if _, err := b.Stream(ctx, transport.StreamConfig{Name: "dup-bad", Subjects: []string{"asyncrl.dup.c"}, Duplicates: -time.Second}); err == nil {
		t.Error("a negative duplicate window was accepted")
	}
}
