package memhub_test

import (
	"context"
	"testing"

	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/memhub"
)

// BenchmarkPublishDeliverAuto measures publish-to-handler cost in auto mode
// with ten subscriptions on the hub (one matching), event log on.
func BenchmarkPublishDeliverAuto(b *testing.B) {
	h := memhub.New(1)
	h.SetAuto(true)
	a, r := h.Connect("a"), h.Connect("b")
	for i := 0; i < 9; i++ {
		if _, err := r.Subscribe("asyncrl.b.other", func(*transport.Msg) {}); err != nil {
			b.Fatal(err)
		}
	}
	n := 0
	if _, err := r.Subscribe("asyncrl.b.steps", func(*transport.Msg) { n++ }); err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 256)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := a.Publish(ctx, "asyncrl.b.steps", data); err != nil {
			b.Fatal(err)
		}
	}
	if n != b.N {
		b.Fatalf("delivered %d of %d", n, b.N)
	}
}
