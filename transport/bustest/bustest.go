package bustest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/transport"
)

// Wait is how long the suite waits for an expected delivery.
const Wait = 10 * time.Second

// Run runs every conformance test against buses made by newBus. newBus
// returns a fresh, isolated bus and a cleanup that closes it (and anything
// behind it).
func Run(t *testing.T, newBus func(t *testing.T) (transport.Bus, func())) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, b transport.Bus)
	}{
		{"PublishSubscribe", testPubSub},
		{"Wildcards", testWildcards},
		{"HandlerOrder", testOrder},
		{"Unsubscribe", testUnsubscribe},
		{"QueueSubscribe", testQueue},
		{"RequestReply", testRequest},
		{"NoResponders", testNoResponders},
		{"BadSubjects", testBadSubjects},
		{"PayloadTooLarge", testPayloadTooLarge},
		{"StreamAckRedeliverResume", testStream},
		{"StreamNak", testStreamNak},
		{"StreamNakDelay", testStreamNakDelay},
		{"StreamConfigRefused", testStreamConfigRefused},
		{"StreamWorkQueue", testStreamWorkQueue},
		{"StreamGetDelete", testStreamGetDelete},
		{"ClosedBus", testClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, cleanup := newBus(t)
			defer cleanup()
			tc.fn(t, b)
		})
	}
}

// collector gathers messages from handlers for assertions.
type collector struct {
	mu   sync.Mutex
	msgs []transport.Msg
}

func (c *collector) handler(m *transport.Msg) {
	cp := *m
	cp.Data = bytes.Clone(m.Data)
	c.mu.Lock()
	c.msgs = append(c.msgs, cp)
	c.mu.Unlock()
}

func (c *collector) snapshot() []transport.Msg {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]transport.Msg(nil), c.msgs...)
}

func (c *collector) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.msgs)
}

// Eventually polls cond until it holds or d passes.
func Eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// flush makes sure everything published before it on b has been delivered
// to b's subscribers: it round-trips a message on a private subject, which
// both implementations deliver after earlier messages.
func flush(t *testing.T, b transport.Bus, tag string) {
	t.Helper()
	subj := "bustest.flush." + tag
	got := make(chan struct{}, 1)
	s, err := b.Subscribe(subj, func(*transport.Msg) {
		select {
		case got <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatalf("flush subscribe: %v", err)
	}
	defer s.Unsubscribe()
	deadline := time.After(Wait)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := b.Publish(context.Background(), subj, nil); err != nil {
			t.Fatalf("flush publish: %v", err)
		}
		select {
		case <-got:
			return
		case <-tick.C:
		case <-deadline:
			t.Fatalf("flush %s: no round trip within %s", tag, Wait)
		}
	}
}

func mustSub(t *testing.T, b transport.Bus, subj string, h transport.Handler) transport.Subscription {
	t.Helper()
	s, err := b.Subscribe(subj, h)
	if err != nil {
		t.Fatalf("Subscribe(%q): %v", subj, err)
	}
	return s
}

func mustPub(t *testing.T, b transport.Bus, subj string, data []byte) {
	t.Helper()
	if err := b.Publish(context.Background(), subj, data); err != nil {
		t.Fatalf("Publish(%q): %v", subj, err)
	}
}

func testPubSub(t *testing.T, b transport.Bus) {
	var c1, c2 collector
	mustSub(t, b, "asyncrl.r1.steps", c1.handler)
	mustSub(t, b, "asyncrl.r1.steps", c2.handler)
	flush(t, b, "a")
	mustPub(t, b, "asyncrl.r1.steps", []byte("v1"))
	mustPub(t, b, "asyncrl.r1.other", []byte("not for us"))
	Eventually(t, Wait, "both subscribers get the message", func() bool { return c1.len() == 1 && c2.len() == 1 })
	flush(t, b, "b")
	for i, c := range []*collector{&c1, &c2} {
		got := c.snapshot()
		if len(got) != 1 || string(got[0].Data) != "v1" || got[0].Subject != "asyncrl.r1.steps" {
			t.Fatalf("subscriber %d got %+v, want one message v1 on asyncrl.r1.steps", i, got)
		}
	}
}

func testWildcards(t *testing.T, b transport.Bus) {
	var star, tail collector
	mustSub(t, b, "asyncrl.r1.engines.*.health", star.handler)
	mustSub(t, b, "asyncrl.r1.>", tail.handler)
	flush(t, b, "a")
	mustPub(t, b, "asyncrl.r1.engines.e1.health", []byte("h1"))
	mustPub(t, b, "asyncrl.r1.engines.e2.load", []byte("l2"))
	mustPub(t, b, "asyncrl.r2.engines.e1.health", []byte("other run"))
	Eventually(t, Wait, "wildcard deliveries", func() bool { return star.len() == 1 && tail.len() == 2 })
	flush(t, b, "b")
	if s := star.snapshot(); len(s) != 1 || string(s[0].Data) != "h1" {
		t.Fatalf("'*' subscriber got %+v, want only h1", s)
	}
	if s := tail.snapshot(); len(s) != 2 {
		t.Fatalf("'>' subscriber got %d messages, want 2", len(s))
	}
}

func testOrder(t *testing.T, b transport.Bus) {
	var c collector
	mustSub(t, b, "asyncrl.r1.turns", c.handler)
	flush(t, b, "a")
	const n = 200
	for i := 0; i < n; i++ {
		mustPub(t, b, "asyncrl.r1.turns", []byte(fmt.Sprint(i)))
	}
	Eventually(t, Wait, "all messages", func() bool { return c.len() == n })
	for i, m := range c.snapshot() {
		if string(m.Data) != fmt.Sprint(i) {
			t.Fatalf("message %d is %q: one publisher's messages must arrive in order", i, m.Data)
		}
	}
}

func testUnsubscribe(t *testing.T, b transport.Bus) {
	var c collector
	s := mustSub(t, b, "asyncrl.r1.sessions", c.handler)
	flush(t, b, "a")
	mustPub(t, b, "asyncrl.r1.sessions", []byte("1"))
	Eventually(t, Wait, "first message", func() bool { return c.len() == 1 })
	if err := s.Unsubscribe(); err != nil {
		t.Fatalf("Unsubscribe: %v", err)
	}
	if err := s.Unsubscribe(); err != nil {
		t.Fatalf("second Unsubscribe must be a no-op, got %v", err)
	}
	mustPub(t, b, "asyncrl.r1.sessions", []byte("2"))
	flush(t, b, "b")
	if n := c.len(); n != 1 {
		t.Fatalf("got %d messages after Unsubscribe, want 1", n)
	}
}

func testQueue(t *testing.T, b transport.Bus) {
	const members, n = 3, 60
	cs := make([]collector, members)
	for i := range cs {
		if _, err := b.QueueSubscribe("asyncrl.r1.prompts", "rollout", cs[i].handler); err != nil {
			t.Fatalf("QueueSubscribe: %v", err)
		}
	}
	var plain collector
	mustSub(t, b, "asyncrl.r1.prompts", plain.handler)
	flush(t, b, "a")
	for i := 0; i < n; i++ {
		mustPub(t, b, "asyncrl.r1.prompts", []byte(fmt.Sprint(i)))
	}
	total := func() int {
		s := 0
		for i := range cs {
			s += cs[i].len()
		}
		return s
	}
	Eventually(t, Wait, "queue deliveries", func() bool { return total() == n && plain.len() == n })
	flush(t, b, "b")
	if got := total(); got != n {
		t.Fatalf("queue group got %d deliveries for %d messages: each must go to exactly one member", got, n)
	}
	var seen []string
	for i := range cs {
		for _, m := range cs[i].snapshot() {
			seen = append(seen, string(m.Data))
		}
	}
	sort.Strings(seen)
	for i := 1; i < len(seen); i++ {
		if seen[i] == seen[i-1] {
			t.Fatalf("message %s delivered to two queue members", seen[i])
		}
	}
}

func testRequest(t *testing.T, b transport.Bus) {
	_, err := b.Subscribe("asyncrl.r1.control", func(m *transport.Msg) {
		if m.Reply == "" {
			t.Errorf("request arrived without a reply subject")
			return
		}
		if err := b.Respond(context.Background(), m, append([]byte("re:"), m.Data...)); err != nil {
			t.Errorf("Respond: %v", err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	flush(t, b, "a")
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	for i := 0; i < 3; i++ {
		rep, err := b.Request(ctx, "asyncrl.r1.control", []byte(fmt.Sprint(i)))
		if err != nil {
			t.Fatalf("Request %d: %v", i, err)
		}
		if want := "re:" + fmt.Sprint(i); string(rep.Data) != want {
			t.Fatalf("reply %q, want %q", rep.Data, want)
		}
	}
	if err := b.Respond(ctx, &transport.Msg{Subject: "x"}, nil); err == nil {
		t.Fatalf("Respond to a message without Reply must fail")
	}
}

func testNoResponders(t *testing.T, b transport.Bus) {
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	_, err := b.Request(ctx, "asyncrl.r1.control.nobody", []byte("?"))
	if !errors.Is(err, transport.ErrNoResponders) {
		t.Fatalf("Request with no subscriber: got %v, want ErrNoResponders", err)
	}
}

func testBadSubjects(t *testing.T, b transport.Bus) {
	for _, s := range []string{"", "a..b", "a.*.b", "a.>", "a b", "a."} {
		if err := b.Publish(context.Background(), s, nil); !errors.Is(err, transport.ErrBadSubject) {
			t.Errorf("Publish(%q) = %v, want ErrBadSubject", s, err)
		}
	}
	for _, s := range []string{"", "a.>.b", "a..b"} {
		if _, err := b.Subscribe(s, func(*transport.Msg) {}); !errors.Is(err, transport.ErrBadSubject) {
			t.Errorf("Subscribe(%q) = %v, want ErrBadSubject", s, err)
		}
	}
}

func testPayloadTooLarge(t *testing.T, b transport.Bus) {
	max := b.MaxPayload()
	if max <= 0 {
		t.Fatalf("MaxPayload() = %d, want > 0", max)
	}
	var c collector
	mustSub(t, b, "asyncrl.r1.transfers", c.handler)
	flush(t, b, "a")
	err := b.Publish(context.Background(), "asyncrl.r1.transfers", make([]byte, max+1))
	if !errors.Is(err, transport.ErrPayloadTooLarge) {
		t.Fatalf("Publish of %d bytes: got %v, want ErrPayloadTooLarge", max+1, err)
	}
	mustPub(t, b, "asyncrl.r1.transfers", make([]byte, max))
	Eventually(t, Wait, "max-size message", func() bool { return c.len() == 1 })
	if got := len(c.snapshot()[0].Data); got != max {
		t.Fatalf("got %d bytes, want %d", got, max)
	}
}

func testClosed(t *testing.T, b transport.Bus) {
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close must be a no-op, got %v", err)
	}
	if err := b.Publish(context.Background(), "asyncrl.r1.steps", nil); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Publish after Close = %v, want ErrClosed", err)
	}
	if _, err := b.Subscribe("asyncrl.r1.steps", func(*transport.Msg) {}); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Subscribe after Close = %v, want ErrClosed", err)
	}
	if _, err := b.Request(context.Background(), "asyncrl.r1.steps", nil); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Request after Close = %v, want ErrClosed", err)
	}
}
