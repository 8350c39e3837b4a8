package node

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/asyncrl/asyncrl/actors/sampling/samplingtest"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// TestBoundSourceRetriesTransientBind: a remote worker's first bind of
// the holder's trajectory buffer that JetStream answers 503 (a cluster
// just started, the stream's leader being elected) is tried again under
// the fetch rule instead of failing step 1 and ending the worker; once
// bound, later fetches read without binding again. A real embedded NATS
// holds the buffer; the bind is wrapped to fail twice first.
func TestBoundSourceRetriesTransientBind(t *testing.T) {
	ctx := context.Background()
	bus, err := natsbus.Connect(ctx, natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bus.Close() })
	const name, subject = "groups-r", "asyncrl.r.trajectories"
	st, err := bus.Stream(ctx, transport.StreamConfig{Name: name, Subjects: []string{subject}, Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	refs := make([]messages.BatchRef, 2)
	for i := range refs {
		refs[i] = storeEmptyGroup(t, st, subject, fmt.Sprintf("g%d", i))
	}

	unavailable := fmt.Errorf("natsbus: bind stream %s: %w: nats: API error: code=503 err_code=10008 description=JetStream system temporarily unavailable", name, transport.ErrUnavailable)
	var binds atomic.Int32
	var retried []int
	b := &boundSource{name: name,
		bindStream: func(ctx context.Context, n string) (transport.Stream, error) {
			if binds.Add(1) <= 2 {
				return nil, unavailable
			}
			return bus.BindStream(ctx, n)
		},
		onRetry: func(group string, try int, err error) {
			if errors.Is(err, transport.ErrUnavailable) {
				retried = append(retried, try)
			}
		}}
	for i, ref := range refs {
		if _, err := b.Fetch(ctx, fmt.Sprintf("g%d", i), ref); err != nil {
			t.Fatalf("fetch %d: %v; want the batch after the bind's retries", i, err)
		}
	}
	if binds.Load() != 3 || fmt.Sprint(retried) != "[1 2]" {
		t.Fatalf("%d binds, retries %v; want 3 binds (2 refused, 1 bound, none for the second fetch) and tries [1 2] reported", binds.Load(), retried)
	}
}

// storeEmptyGroup stores a GroupReady with an empty token batch and
// returns its reference.
func storeEmptyGroup(t *testing.T, st transport.Stream, subject, group string) messages.BatchRef {
	t.Helper()
	tb, err := messages.NewTokenBatch(messages.BatchSpec{Vocab: 98})
	if err != nil {
		t.Fatal(err)
	}
	return samplingtest.StoreGroup(t, st, subject, group, tb)
}
