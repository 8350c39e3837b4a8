package natsbus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
	"github.com/asyncrl/asyncrl/transport/natsbus/natstest"
)

// streamOnce creates cfg, riding out the JetStream meta leader's first
// election (requests time out until there is one).
func streamOnce(t *testing.T, b *natsbus.Bus, cfg transport.StreamConfig) error {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err := b.Stream(ctx, cfg)
		cancel()
		if err == nil || !errors.Is(err, transport.ErrTimeout) || time.Now().After(deadline) {
			return err
		}
	}
}

// A cluster with fewer servers up than a stream's replicas refuses to
// place it (the soak's two-kill stall: every new term failed creating its
// R3 ledger stream on the two servers left, seed 3721); with MinReplicas
// the stream is created with the copies the cluster can hold.
func TestStreamStepsDownReplicas(t *testing.T) {
	buses := natstest.Cluster(t, 2)
	err := streamOnce(t, buses[0], transport.StreamConfig{Name: "strict", Subjects: []string{"strict"}, Replicas: 3})
	if !natsbus.IsNoPlacement(err) {
		t.Fatalf("R3 on two servers without MinReplicas: %v, want JetStream's no-placement refusal", err)
	}
	cfg := transport.StreamConfig{Name: "term", Subjects: []string{"term"}, Replicas: 3, MinReplicas: 1}
	if err := streamOnce(t, buses[0], cfg); err != nil {
		t.Fatalf("R3 with MinReplicas 1 on two servers: %v", err)
	}
	h, err := buses[1].ProbeStream(context.Background(), "term")
	if err != nil {
		t.Fatal(err)
	}
	if h.Replicas != 2 {
		t.Fatalf("stream has %d copies, want the 2 the cluster can hold", h.Replicas)
	}
	// Opening it again with the same config (a second writer of the
	// term) keeps it, instead of failing on the scale-up.
	if err := streamOnce(t, buses[1], cfg); err != nil {
		t.Fatalf("reopening: %v", err)
	}
	if err := (transport.StreamConfig{Name: "x", Subjects: []string{"x"}, Replicas: 2, MinReplicas: 3}).Validate(); err == nil {
		t.Fatal("MinReplicas above Replicas validated")
	}
}
