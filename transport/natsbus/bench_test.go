package natsbus_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// BenchmarkPublishDeliver measures publish-to-handler throughput of 256-byte
// messages through the embedded server.
func BenchmarkPublishDeliver(b *testing.B) {
	bus, err := natsbus.Connect(context.Background(), natsbus.DefaultOptions())
	if err != nil {
		b.Fatal(err)
	}
	defer bus.Close()
	benchPublishDeliver(b, bus, "asyncrl.b.steps")
}

// benchPublishDeliver publishes b.N 256-byte messages on subj and returns
// when the bus's own subscription has received them all.
func benchPublishDeliver(b *testing.B, bus *natsbus.Bus, subj string) {
	b.Helper()
	var n atomic.Int64
	done := make(chan struct{})
	target := int64(b.N)
	if _, err := bus.Subscribe(subj, func(*transport.Msg) {
		if n.Add(1) == target {
			close(done)
		}
	}); err != nil {
		b.Fatal(err)
	}
	_ = bus.Conn().Flush()
	data := make([]byte, 256)
	ctx := context.Background()
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := bus.Publish(ctx, subj, data); err != nil {
			b.Fatal(err)
		}
	}
	<-done
}

// BenchmarkRequestReply measures one request/reply round trip.
func BenchmarkRequestReply(b *testing.B) {
	bus, err := natsbus.Connect(context.Background(), natsbus.DefaultOptions())
	if err != nil {
		b.Fatal(err)
	}
	defer bus.Close()
	ctx := context.Background()
	if _, err := bus.Subscribe("asyncrl.b.control", func(m *transport.Msg) { _ = bus.Respond(ctx, m, m.Data) }); err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 64)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := bus.Request(ctx, "asyncrl.b.control", data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStreamPublish measures an acknowledged JetStream publish (memory
// storage).
func BenchmarkStreamPublish(b *testing.B) {
	bus, err := natsbus.Connect(context.Background(), natsbus.DefaultOptions())
	if err != nil {
		b.Fatal(err)
	}
	defer bus.Close()
	ctx := context.Background()
	st, err := bus.Stream(ctx, transport.StreamConfig{Name: "B", Subjects: []string{"asyncrl.b.trajectories"}, Memory: true})
	if err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 256)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := st.Publish(ctx, "asyncrl.b.trajectories", data); err != nil {
			b.Fatal(err)
		}
	}
}
