package publisher

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// A lost announcement must not stall training: the publisher repeats it
// until an engine acks. Here the "node" ignores the first announcement (as
// if it arrived during a reconnect) and acks the second.
func TestBusPublisherRepeatsAnnouncementUntilAcked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	bus, err := natsbus.Connect(ctx, natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	const weights, acks = "asyncrl.r.weights", "asyncrl.r.engines.*.ack"
	var seen atomic.Int32
	sub, err := bus.Subscribe(weights, func(m *transport.Msg) {
		wp, err := messages.DecodeAs[messages.WeightsPublished](m.Data)
		if err != nil {
			t.Error(err)
			return
		}
		if seen.Add(1) == 1 {
			return // lost
		}
		data, _ := messages.Encode(messages.EngineVersionAck{Header: messages.Header{RunID: "r", Sender: "e0", Version: wp.Version}, Engine: "e0"})
		_ = bus.Publish(context.Background(), "asyncrl.r.engines.e0.ack", data)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	m, err := model.New(model.DefaultConfig(), 1)
	if err != nil {
		t.Fatal(err)
	}
	p := &BusPublisher{Bus: bus, RunID: "r", Sender: "w", Dir: t.TempDir(), Weights: weights, Acks: acks,
		AckTimeout: 10 * time.Second, Resend: 20 * time.Millisecond}
	if err := p.Publish(ctx, InMemory(m), 1); err != nil {
		t.Fatalf("publish with the first announcement lost: %v", err)
	}
	if n := seen.Load(); n < 2 {
		t.Fatalf("announcement sent %d times, want a repeat", n)
	}
}
