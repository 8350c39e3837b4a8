package bustest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
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

type streamCollector struct {
	mu   sync.Mutex
	msgs []*transport.StreamMsg
}

func (c *streamCollector) handler(m *transport.StreamMsg) {
	cp := *m
	cp.Data = bytes.Clone(m.Data)
	c.mu.Lock()
	c.msgs = append(c.msgs, &cp)
	c.mu.Unlock()
}

func (c *streamCollector) snapshot() []*transport.StreamMsg {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*transport.StreamMsg(nil), c.msgs...)
}

func testStream(t *testing.T, b transport.Bus) {
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	st, err := b.Stream(ctx, transport.StreamConfig{Name: "LEDGER", Subjects: []string{"asyncrl.r1.ledger.>"}, Memory: true})
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	if st.Name() != "LEDGER" {
		t.Fatalf("Name() = %q", st.Name())
	}
	// Opening it again must succeed (create-or-update) and see the same log.
	if _, err := b.Stream(ctx, transport.StreamConfig{Name: "LEDGER", Subjects: []string{"asyncrl.r1.ledger.>"}, Memory: true}); err != nil {
		t.Fatalf("second Stream: %v", err)
	}
	for i := 1; i <= 3; i++ {
		seq, err := st.Publish(ctx, "asyncrl.r1.ledger.p", []byte(fmt.Sprint(i)))
		if err != nil {
			t.Fatalf("stream Publish: %v", err)
		}
		if seq != uint64(i) {
			t.Fatalf("sequence %d, want %d", seq, i)
		}
	}
	if _, err := st.Publish(ctx, "asyncrl.r1.elsewhere", nil); err == nil {
		t.Fatalf("publishing outside the stream's subjects must fail")
	}

	// 1. Consume without acking: every message is redelivered after ackWait.
	const ackWait = 300 * time.Millisecond
	var noAck streamCollector
	s1, err := st.Consume(ctx, "trainer", ackWait, noAck.handler)
	if err != nil {
		t.Fatalf("Consume: %v", err)
	}
	Eventually(t, Wait, "redelivery of unacked messages", func() bool {
		n := 0
		for _, m := range noAck.snapshot() {
			if m.Delivered >= 2 {
				n++
			}
		}
		return n >= 3
	})
	first := noAck.snapshot()[:3]
	for i, m := range first {
		if m.Sequence != uint64(i+1) || string(m.Data) != fmt.Sprint(i+1) || m.Delivered != 1 || m.Subject != "asyncrl.r1.ledger.p" {
			t.Fatalf("first delivery %d = seq %d delivered %d data %q subject %s", i, m.Sequence, m.Delivered, m.Data, m.Subject)
		}
	}
	if err := s1.Unsubscribe(); err != nil {
		t.Fatal(err)
	}

	// 2. Ack everything; acked messages are not delivered again.
	var acked streamCollector
	ackSeen := map[uint64]bool{}
	var mu sync.Mutex
	s2, err := st.Consume(ctx, "trainer", ackWait, func(m *transport.StreamMsg) {
		acked.handler(m)
		if err := m.Ack(); err != nil {
			t.Errorf("Ack: %v", err)
		}
		mu.Lock()
		ackSeen[m.Sequence] = true
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	Eventually(t, Wait, "delivery of the three messages to the acking consumer", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ackSeen) == 3
	})
	// Longer than ackWait, measured by the bus's own progress: publish a
	// marker and wait for it, then wait past ackWait for a redelivery that
	// must not come.
	if _, err := st.Publish(ctx, "asyncrl.r1.ledger.p", []byte("4")); err != nil {
		t.Fatal(err)
	}
	Eventually(t, Wait, "message 4", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ackSeen[4]
	})
	waitPast(t, b, 2*ackWait)
	for _, m := range acked.snapshot() {
		if m.Delivered > 1 && m.Sequence == 4 {
			t.Fatalf("acked message %d was delivered again", m.Sequence)
		}
	}
	count := map[uint64]int{}
	for _, m := range acked.snapshot() {
		count[m.Sequence]++
	}
	for seq, n := range count {
		if n > 1 {
			t.Fatalf("message %d delivered %d times to the acking consumer", seq, n)
		}
	}
	if err := s2.Unsubscribe(); err != nil {
		t.Fatal(err)
	}

	// 3. A new Consume with the same durable resumes after the last ack.
	if _, err := st.Publish(ctx, "asyncrl.r1.ledger.p", []byte("5")); err != nil {
		t.Fatal(err)
	}
	var resumed streamCollector
	s3, err := st.Consume(ctx, "trainer", ackWait, func(m *transport.StreamMsg) {
		resumed.handler(m)
		_ = m.Ack()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Unsubscribe()
	Eventually(t, Wait, "message 5 on resume", func() bool { return len(resumed.snapshot()) >= 1 })
	waitPast(t, b, ackWait)
	got := resumed.snapshot()
	if len(got) != 1 || got[0].Sequence != 5 {
		var seqs []uint64
		for _, m := range got {
			seqs = append(seqs, m.Sequence)
		}
		t.Fatalf("resumed consumer got sequences %v, want only [5]", seqs)
	}

	// 4. Another durable starts from the beginning.
	var other streamCollector
	s4, err := st.Consume(ctx, "auditor", ackWait, func(m *transport.StreamMsg) { other.handler(m); _ = m.Ack() })
	if err != nil {
		t.Fatal(err)
	}
	defer s4.Unsubscribe()
	Eventually(t, Wait, "a second durable reads the whole stream", func() bool { return len(other.snapshot()) == 5 })
}

func testStreamNak(t *testing.T, b transport.Bus) {
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	st, err := b.Stream(ctx, transport.StreamConfig{Name: "NAK", Subjects: []string{"asyncrl.r1.groups"}, Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Publish(ctx, "asyncrl.r1.groups", []byte("g")); err != nil {
		t.Fatal(err)
	}
	var c streamCollector
	// A long ackWait: the second delivery can only come from the Nak.
	s, err := st.Consume(ctx, "filter", time.Hour, func(m *transport.StreamMsg) {
		c.handler(m)
		if m.Delivered == 1 {
			_ = m.Nak()
		} else {
			_ = m.Ack()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Unsubscribe()
	Eventually(t, Wait, "redelivery after Nak", func() bool { return len(c.snapshot()) == 2 })
	if got := c.snapshot(); got[1].Delivered != 2 || got[1].Sequence != 1 {
		t.Fatalf("second delivery: seq %d delivered %d, want seq 1 delivered 2", got[1].Sequence, got[1].Delivered)
	}
}

// testStreamNakDelay: a message refused with NakDelay comes back once
// the delay has passed on the bus's clock, neither at once nor only after
// AckWait (an hour here).
func testStreamNakDelay(t *testing.T, b transport.Bus) {
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	st, err := b.Stream(ctx, transport.StreamConfig{Name: "NAKD", Subjects: []string{"asyncrl.r1.groups"}, Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Publish(ctx, "asyncrl.r1.groups", []byte("g")); err != nil {
		t.Fatal(err)
	}
	now := time.Now
	if c, ok := b.(interface{ Now() time.Time }); ok {
		now = c.Now
	}
	const delay = 300 * time.Millisecond
	var mu sync.Mutex
	var at []time.Time
	s, err := st.Consume(ctx, "filter", time.Hour, func(m *transport.StreamMsg) {
		mu.Lock()
		at = append(at, now())
		mu.Unlock()
		if m.Delivered == 1 {
			_ = m.NakDelay(delay)
		} else {
			_ = m.Ack()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Unsubscribe()
	Eventually(t, Wait, "redelivery after NakDelay", func() bool { mu.Lock(); defer mu.Unlock(); return len(at) == 2 })
	mu.Lock()
	gap := at[1].Sub(at[0])
	mu.Unlock()
	if gap < delay {
		t.Fatalf("redelivered %v after NakDelay(%v)", gap, delay)
	}
}

// waitPast lets at least d pass on the bus's clock. Buses with a real clock
// just take d of wall time; virtual-clock buses advance while we wait.
func waitPast(t *testing.T, b transport.Bus, d time.Duration) {
	t.Helper()
	if c, ok := b.(interface{ Now() time.Time }); ok {
		start := c.Now()
		Eventually(t, Wait, "bus clock to advance", func() bool { return c.Now().Sub(start) >= d })
		flush(t, b, "wait")
		return
	}
	deadline := time.Now().Add(d)
	Eventually(t, d+Wait, "wall clock", func() bool { return time.Now().After(deadline) })
	flush(t, b, "wait")
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

// testStreamConfigRefused: both buses refuse the same bad stream configs
// (StreamConfig.Validate) and name the field.
func testStreamConfigRefused(t *testing.T, b transport.Bus) {
	ctx := context.Background()
	ok := transport.StreamConfig{Name: "S", Subjects: []string{"asyncrl.r1.s"}, Memory: true}
	for _, c := range []struct {
		field string
		mut   func(*transport.StreamConfig)
	}{
		{"stream name", func(c *transport.StreamConfig) { c.Name = "a.b" }},
		{"Subjects is empty", func(c *transport.StreamConfig) { c.Subjects = nil }},
		{"bad subject", func(c *transport.StreamConfig) { c.Subjects = []string{"asyncrl..s"} }},
		{"MaxAge -1s", func(c *transport.StreamConfig) { c.MaxAge = -time.Second }},
		{"MaxBytes -1", func(c *transport.StreamConfig) { c.MaxBytes = -1 }},
	} {
		cfg := ok
		c.mut(&cfg)
		if _, err := b.Stream(ctx, cfg); err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("Stream(%+v) = %v, want an error naming %q", cfg, err, c.field)
		}
	}
	if _, err := b.Stream(ctx, ok); err != nil {
		t.Fatalf("Stream(%+v): %v", ok, err)
	}
}

// testStreamWorkQueue: a work-queue stream delivers to its one durable
// consumer as any stream does, and refuses a second durable (JetStream's
// rule; the acked messages are gone, so a new reader could not replay
// them anyway).
func testStreamWorkQueue(t *testing.T, b transport.Bus) {
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	st, err := b.Stream(ctx, transport.StreamConfig{Name: "WQ", Subjects: []string{"asyncrl.r1.wq"}, Memory: true, WorkQueue: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := st.Publish(ctx, "asyncrl.r1.wq", []byte{byte('a' + i)}); err != nil {
			t.Fatal(err)
		}
	}
	var c streamCollector
	s, err := st.Consume(ctx, "sampling", time.Hour, func(m *transport.StreamMsg) { c.handler(m); _ = m.Ack() })
	if err != nil {
		t.Fatal(err)
	}
	Eventually(t, Wait, "three deliveries", func() bool { return len(c.snapshot()) == 3 })
	if _, err := st.Consume(ctx, "auditor", time.Hour, func(m *transport.StreamMsg) {}); err == nil {
		t.Fatal("a second durable on a work-queue stream was accepted")
	}
	if _, err := st.Publish(ctx, "asyncrl.r1.wq", []byte("d")); err != nil {
		t.Fatal(err)
	}
	Eventually(t, Wait, "the fourth delivery", func() bool { return len(c.snapshot()) == 4 })
	_ = s.Unsubscribe()
	if got := c.snapshot(); string(got[3].Data) != "d" || got[3].Delivered != 1 {
		t.Fatalf("fourth delivery %q delivered %d; want d, once", got[3].Data, got[3].Delivered)
	}
}
