package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// Issue 37, a stalled start: the client lists a bucket through a watcher
// that first reads the bucket's last metadata message; when that read
// fails (here the user may not send direct gets, as a bucket's replicas
// just created on a cluster do not answer them yet) the watcher never
// says its initial values are done, and for an empty bucket List waited
// for its context — forever, for a term's start. List is bounded by
// ListTimeout now and fails with a deadline a Retrying store tries again;
// and an empty bucket is answered from its stream's state, without the
// watcher.
func TestNATSListIsBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o := natsbus.DefaultOptions()
	o.Users = []natsbus.User{{Name: "u", Password: "p", Permissions: &natsbus.Permissions{
		Publish: natsbus.Rule{Allow: []string{">"}, Deny: []string{"$JS.API.DIRECT.GET.>"}}, Subscribe: natsbus.Rule{Allow: []string{">"}}}},
		{Name: "w", Password: "p"}}
	o.Auth = natsbus.Auth{User: "u", Password: "p"}
	bus, err := natsbus.Connect(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	cfg := DefaultNATSConfig("fresh")
	cfg.Storage, cfg.ListTimeout = jetstream.MemoryStorage, time.Second
	s, err := NewNATS(ctx, bus.Conn(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A bucket that holds nothing is answered from its stream's state,
	// without the watcher: at once, even where direct gets are denied.
	start := time.Now()
	if keys, err := s.List(context.Background(), ""); err != nil || len(keys) != 0 {
		t.Fatalf("List of an empty bucket: %v, %v; want none, no error", keys, err)
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Fatalf("List of an empty bucket took %s: it waited for the watcher", took)
	}
	// A bucket that held an object (its stream keeps the deletion's
	// marker) is listed through the watcher, which never finishes here.
	wc, err := nats.Connect(bus.ClientURL(), nats.UserInfo("w", "p"))
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	w, err := NewNATS(ctx, wc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Put(ctx, "v0", strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	if err := w.Delete(ctx, "v0"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	start = time.Now()
	go func() {
		_, err := s.List(context.Background(), "") // no deadline of its own, as a term's start
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("List: %v; want a deadline", err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("List took %s; ListTimeout is 1s", took)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("List of a bucket whose first read failed did not return in 20 s")
	}
	// Through a Retrying store, the deadline is transient: retried, then
	// returned (the caller's retry loop or watch decides).
	r, err := NewRetrying(s, RetryConfig{Attempts: 2, BaseDelay: 10 * time.Millisecond, MaxDelay: 10 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.List(ctx, ""); !errors.Is(err, context.DeadlineExceeded) || r.Retries() != 1 {
		t.Fatalf("Retrying List: %v after %d retries; want a deadline after 1 retry", err, r.Retries())
	}
}
