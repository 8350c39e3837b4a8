package bustest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/transport"
)

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
	st := openLedgerStream(ctx, t, b)
	const ackWait = 300 * time.Millisecond
	streamRedelivers(ctx, t, st, ackWait)
	streamAckedOnce(ctx, t, b, st, ackWait)
	s3 := streamResumes(ctx, t, b, st, ackWait)
	defer s3.Unsubscribe()

	// 4. Another durable starts from the beginning.
	var other streamCollector
	s4, err := st.Consume(ctx, "auditor", ackWait, func(m *transport.StreamMsg) { other.handler(m); _ = m.Ack() })
	if err != nil {
		t.Fatal(err)
	}
	defer s4.Unsubscribe()
	Eventually(t, Wait, "a second durable reads the whole stream", func() bool { return len(other.snapshot()) == 5 })
}

// openLedgerStream opens the LEDGER stream twice (create-or-update) and
// publishes messages 1..3 to it, checking their sequences, and that a
// subject outside it is refused.
func openLedgerStream(ctx context.Context, t *testing.T, b transport.Bus) transport.Stream {
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
	return st
}

// streamRedelivers: 1. Consume without acking: every message is
// redelivered after ackWait.
func streamRedelivers(ctx context.Context, t *testing.T, st transport.Stream, ackWait time.Duration) {
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
}

// streamAckedOnce: 2. Ack everything; acked messages are not delivered
// again.
func streamAckedOnce(ctx context.Context, t *testing.T, b transport.Bus, st transport.Stream, ackWait time.Duration) {
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
}

// streamResumes: 3. A new Consume with the same durable resumes after the
// last ack. The caller unsubscribes the consumer it returns.
func streamResumes(ctx context.Context, t *testing.T, b transport.Bus, st transport.Stream, ackWait time.Duration) transport.Subscription {
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
	ok := false
	defer func() {
		if !ok { // t.Fatal: unsubscribe here, as a deferred Unsubscribe did
			s3.Unsubscribe()
		}
	}()
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
	ok = true
	return s3
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

// testStreamGetDelete: a stream reads a stored message back by sequence
// (the trainer fetching a referenced group), an acked message of a
// limits stream stays readable, a deleted one is ErrNoMessage (and
// deleting it again is not an error), and a deleted message is never
// delivered to a consumer that had not reached it.
func testStreamGetDelete(t *testing.T, b transport.Bus) {
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	st, err := b.Stream(ctx, transport.StreamConfig{Name: "GD", Subjects: []string{"asyncrl.r1.gd"}, Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	sr, ok := st.(transport.StoredReader)
	if !ok {
		t.Fatalf("%T does not implement transport.StoredReader", st)
	}
	var seqs []uint64
	for _, p := range []string{"a", "b", "c"} {
		seq, err := st.Publish(ctx, "asyncrl.r1.gd", []byte(p))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	if err := sr.DeleteMsg(ctx, seqs[1]); err != nil {
		t.Fatalf("DeleteMsg(%d): %v", seqs[1], err)
	}
	if err := sr.DeleteMsg(ctx, seqs[1]); err != nil {
		t.Fatalf("second DeleteMsg(%d): %v (want nil: a second release is harmless)", seqs[1], err)
	}
	if _, err := sr.GetMsg(ctx, seqs[1]); !errors.Is(err, transport.ErrNoMessage) {
		t.Fatalf("GetMsg of a deleted message: %v, want ErrNoMessage", err)
	}
	if _, err := sr.GetMsg(ctx, seqs[2]+10); !errors.Is(err, transport.ErrNoMessage) {
		t.Fatalf("GetMsg past the end: %v, want ErrNoMessage", err)
	}
	var c streamCollector
	s, err := st.Consume(ctx, "reader", time.Hour, func(m *transport.StreamMsg) { c.handler(m); _ = m.Ack() })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Unsubscribe() }()
	Eventually(t, Wait, "two deliveries", func() bool { return len(c.snapshot()) == 2 })
	for _, i := range []int{0, 2} {
		m, err := sr.GetMsg(ctx, seqs[i])
		if err != nil {
			t.Fatalf("GetMsg(%d) of an acked message of a limits stream: %v", seqs[i], err)
		}
		if m.Sequence != seqs[i] || m.Subject != "asyncrl.r1.gd" || string(m.Data) != string(rune('a'+i)) {
			t.Fatalf("GetMsg(%d) = %+v, want seq %d subject asyncrl.r1.gd data %q", seqs[i], m, seqs[i], string(rune('a'+i)))
		}
	}
	if got := c.snapshot(); string(got[0].Data) != "a" || string(got[1].Data) != "c" {
		t.Fatalf("delivered %q, %q; want a, c (the deleted b skipped)", got[0].Data, got[1].Data)
	}
}
