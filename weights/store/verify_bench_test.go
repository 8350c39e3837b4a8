package store

import (
	"bytes"
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// BenchmarkNATSPut: a 4 MiB Put with and without VerifyPuts (the read
// back of a replicated bucket), side by side on one embedded server.
func BenchmarkNATSPut(b *testing.B) {
	ctx := context.Background()
	bus, err := natsbus.Connect(ctx, natsbus.DefaultOptions())
	if err != nil {
		b.Fatal(err)
	}
	defer bus.Close()
	data := bytes.Repeat([]byte("weights!"), 512<<10)
	for _, verify := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "verified"}[verify]
		b.Run(name, func(b *testing.B) {
			cfg := DefaultNATSConfig("bench-" + name)
			cfg.Storage = jetstream.MemoryStorage
			cfg.VerifyPuts = verify
			s, err := NewNATS(ctx, bus.Conn(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if err := PutBytes(ctx, s, "k", data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
