package memhub_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/memhub"
)

// TestSubscriptionsListsOpenSubjectsOnly: Subscriptions names each open
// subscription's subject once, forgets an unsubscribed one and leaves a
// request's reply inbox out.
func TestSubscriptionsListsOpenSubjectsOnly(t *testing.T) {
	h := memhub.New(1)
	h.SetAuto(true)
	a, b := h.Connect("a"), h.Connect("b")
	sub(t, a, "asyncrl.r.steps")
	sub(t, b, "asyncrl.r.steps")
	sub(t, b, "asyncrl.r.engines.*.ack")
	gone, err := a.Subscribe("asyncrl.r.train", func(*transport.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	var during []string // the subscriptions while a request waits for its reply
	if _, err := b.Subscribe("asyncrl.r.control", func(m *transport.Msg) {
		during = h.Subscriptions()
		_ = b.Respond(context.Background(), m, []byte("ok"))
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{"asyncrl.r.control", "asyncrl.r.engines.*.ack", "asyncrl.r.steps", "asyncrl.r.train"}
	if got := h.Subscriptions(); !slices.Equal(got, want) {
		t.Fatalf("Subscriptions() = %q, want %q", got, want)
	}
	if err := gone.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	// A request opens a reply inbox while it waits: never listed.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := a.Request(ctx, "asyncrl.r.control", nil); err != nil {
		t.Fatal(err)
	}
	want = []string{"asyncrl.r.control", "asyncrl.r.engines.*.ack", "asyncrl.r.steps"}
	if !slices.Equal(during, want) {
		t.Fatalf("while a request waited: Subscriptions() = %q, want %q (no reply inbox)", during, want)
	}
	if got := h.Subscriptions(); !slices.Equal(got, want) {
		t.Fatalf("after unsubscribe and a request: Subscriptions() = %q, want %q", got, want)
	}
}
