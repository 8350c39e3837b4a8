package clustertest

import (
	"context"
	"testing"

	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// EmbeddedBus is a bus of its own (an embedded server, JetStream on disk
// in a temporary directory), closed when the test ends.
func EmbeddedBus(t *testing.T) *natsbus.Bus {
	t.Helper()
	opts := natsbus.DefaultOptions()
	opts.StoreDir = t.TempDir()
	bus, err := natsbus.Connect(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bus.Close() })
	return bus
}
