package memhub_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/memhub"
)

// inbox records what one subscription received, in order.
type inbox struct {
	mu   sync.Mutex
	data []string
}

func (i *inbox) h(m *transport.Msg) {
	i.mu.Lock()
	i.data = append(i.data, string(m.Data))
	i.mu.Unlock()
}

func (i *inbox) got() []string {
	i.mu.Lock()
	defer i.mu.Unlock()
	return slices.Clone(i.data)
}

func sub(t *testing.T, b transport.Bus, subject string) *inbox {
	t.Helper()
	in := &inbox{}
	if _, err := b.Subscribe(subject, in.h); err != nil {
		t.Fatal(err)
	}
	return in
}

func pub(t *testing.T, b transport.Bus, subject, data string) {
	t.Helper()
	if err := b.Publish(context.Background(), subject, []byte(data)); err != nil {
		t.Fatal(err)
	}
}

func seqData(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint(i)
	}
	return out
}

const steps = "asyncrl.r.steps"

func TestManualModeDeliversOnlyWhenDriven(t *testing.T) {
	h := memhub.New(1)
	a, b := h.Connect("a"), h.Connect("b")
	in := sub(t, b, steps)
	pub(t, a, steps, "0")
	pub(t, a, steps, "1")
	if got := in.got(); len(got) != 0 {
		t.Fatalf("delivered %v before any driver ran", got)
	}
	if !h.Step() {
		t.Fatal("Step found nothing")
	}
	if got := in.got(); !slices.Equal(got, []string{"0"}) {
		t.Fatalf("after one Step: %v", got)
	}
	if n := h.Drain(); n != 1 {
		t.Fatalf("Drain processed %d, want 1", n)
	}
	if h.Step() {
		t.Fatal("Step on an empty hub reported a delivery")
	}
	if got := in.got(); !slices.Equal(got, []string{"0", "1"}) {
		t.Fatalf("got %v", got)
	}
}

func TestAutoModeDeliversHandlerPublishesInTheSameRun(t *testing.T) {
	h := memhub.New(1)
	h.SetAuto(true)
	a, b := h.Connect("a"), h.Connect("b")
	// b echoes steps to turns; a listens on turns.
	if _, err := b.Subscribe(steps, func(m *transport.Msg) {
		_ = b.Publish(context.Background(), "asyncrl.r.turns", m.Data)
	}); err != nil {
		t.Fatal(err)
	}
	turns := sub(t, a, "asyncrl.r.turns")
	pub(t, a, steps, "x")
	if got := turns.got(); !slices.Equal(got, []string{"x"}) {
		t.Fatalf("auto mode: got %v right after Publish, want [x]", got)
	}
}

func TestDropAll(t *testing.T) {
	h := memhub.New(1)
	a, b := h.Connect("a"), h.Connect("b")
	dropped := sub(t, b, steps)
	other := sub(t, b, "asyncrl.r.turns")
	h.MustAddFault(memhub.Fault{Kind: memhub.Drop, Match: memhub.Selector{Subject: steps}})
	pub(t, a, steps, "lost")
	pub(t, a, "asyncrl.r.turns", "kept")
	h.Drain()
	h.Advance(time.Hour)
	if got := dropped.got(); len(got) != 0 {
		t.Fatalf("dropped subject delivered %v", got)
	}
	if got := other.got(); !slices.Equal(got, []string{"kept"}) {
		t.Fatalf("unselected subject got %v, want [kept]", got)
	}
	if n := h.Count(memhub.EvDrop, steps); n != 1 {
		t.Fatalf("event log has %d drops, want 1:\n%s", n, h.EventLog())
	}
}

func TestDropProbability(t *testing.T) {
	h := memhub.New(7)
	a, b := h.Connect("a"), h.Connect("b")
	in := sub(t, b, steps)
	h.MustAddFault(memhub.Fault{Kind: memhub.Drop, Probability: 0.5})
	const n = 400
	for i := 0; i < n; i++ {
		pub(t, a, steps, fmt.Sprint(i))
	}
	h.Drain()
	got, drops := len(in.got()), h.Count(memhub.EvDrop, steps)
	if got+drops != n {
		t.Fatalf("delivered %d + dropped %d != published %d", got, drops, n)
	}
	if got < n/4 || got > 3*n/4 {
		t.Fatalf("p=0.5 delivered %d of %d", got, n)
	}
}

func TestDelayFixed(t *testing.T) {
	h := memhub.New(1)
	a, b := h.Connect("a"), h.Connect("b")
	in := sub(t, b, steps)
	h.MustAddFault(memhub.Fault{Kind: memhub.Delay, Delay: 100 * time.Millisecond})
	pub(t, a, steps, "late")
	h.Drain()
	h.Advance(99 * time.Millisecond)
	if got := in.got(); len(got) != 0 {
		t.Fatalf("delivered %v before the delay passed", got)
	}
	h.Advance(time.Millisecond)
	if got := in.got(); !slices.Equal(got, []string{"late"}) {
		t.Fatalf("after the delay got %v", got)
	}
	if e := h.Elapsed(); e != 100*time.Millisecond {
		t.Fatalf("virtual clock at %s, want 100ms", e)
	}
}

func TestDelayRandom(t *testing.T) {
	h := memhub.New(3)
	a, b := h.Connect("a"), h.Connect("b")
	in := sub(t, b, steps)
	const d, n = time.Second, 50
	h.MustAddFault(memhub.Fault{Kind: memhub.Delay, Delay: d, RandomDelay: true})
	for i := 0; i < n; i++ {
		pub(t, a, steps, fmt.Sprint(i))
	}
	h.Advance(d / 2)
	half := len(in.got())
	if half == 0 || half == n {
		t.Fatalf("random delay up to %s: %d of %d arrived by %s, want some but not all", d, half, n, d/2)
	}
	h.Advance(d / 2)
	if got := len(in.got()); got != n {
		t.Fatalf("after %s only %d of %d arrived", d, got, n)
	}
}

func TestDuplicate(t *testing.T) {
	h := memhub.New(1)
	a, b := h.Connect("a"), h.Connect("b")
	in := sub(t, b, steps)
	id := h.MustAddFault(memhub.Fault{Kind: memhub.Duplicate})
	pub(t, a, steps, "x")
	h.Drain()
	if got := in.got(); !slices.Equal(got, []string{"x", "x"}) {
		t.Fatalf("duplicate: got %v, want the message twice", got)
	}
	h.RemoveFault(id)
	h.MustAddFault(memhub.Fault{Kind: memhub.Duplicate, Copies: 2})
	pub(t, a, steps, "y")
	h.Drain()
	if got := in.got(); !slices.Equal(got, []string{"x", "x", "y", "y", "y"}) {
		t.Fatalf("two copies: got %v", got)
	}
}

func TestReorder(t *testing.T) {
	h := memhub.New(5)
	a, b := h.Connect("a"), h.Connect("b")
	in := sub(t, b, steps)
	h.MustAddFault(memhub.Fault{Kind: memhub.Reorder, Window: 8})
	want := seqData(8)
	for _, d := range want {
		pub(t, a, steps, d)
	}
	h.Drain()
	got := in.got()
	if len(got) != len(want) {
		t.Fatalf("reorder lost messages: got %v", got)
	}
	if slices.Equal(got, want) {
		t.Fatalf("seed 5 left the window in publish order %v", got)
	}
	sorted := slices.Clone(got)
	slices.SortFunc(sorted, func(x, y string) int { return len(x) - len(y) + cmpStr(x, y) })
	if !slices.Equal(sorted, want) {
		t.Fatalf("reordered set %v is not the published set", got)
	}
}

func cmpStr(x, y string) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

func TestReorderPartialWindowWaitsForDrain(t *testing.T) {
	h := memhub.New(5)
	h.SetAuto(true)
	a, b := h.Connect("a"), h.Connect("b")
	in := sub(t, b, steps)
	h.MustAddFault(memhub.Fault{Kind: memhub.Reorder, Window: 4})
	for _, d := range seqData(3) {
		pub(t, a, steps, d)
	}
	if got := in.got(); len(got) != 0 {
		t.Fatalf("partial window released early: %v", got)
	}
	if h.Pending() != 3 {
		t.Fatalf("Pending() = %d, want the 3 held deliveries", h.Pending())
	}
	h.Drain()
	if got := in.got(); len(got) != 3 {
		t.Fatalf("Drain released %v, want all 3", got)
	}
}

func TestPartition(t *testing.T) {
	h := memhub.New(1)
	a, b, c := h.Connect("a"), h.Connect("b"), h.Connect("c")
	inA, inB, inC := sub(t, a, steps), sub(t, b, steps), sub(t, c, steps)
	h.Partition([]string{"a"}, []string{"b", "c"})
	pub(t, a, steps, "from-a")
	pub(t, b, steps, "from-b")
	h.Drain()
	if got := inA.got(); !slices.Equal(got, []string{"from-a"}) {
		t.Fatalf("a got %v, want only its own message", got)
	}
	for name, in := range map[string]*inbox{"b": inB, "c": inC} {
		if got := in.got(); !slices.Equal(got, []string{"from-b"}) {
			t.Fatalf("%s got %v, want only from-b (same side)", name, got)
		}
	}
	// A request across the partition sees no responders.
	if _, err := c.Subscribe("asyncrl.r.control", func(m *transport.Msg) { _ = c.Respond(context.Background(), m, []byte("ok")) }); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Request(context.Background(), "asyncrl.r.control", nil); !errors.Is(err, transport.ErrNoResponders) {
		t.Fatalf("request across the partition: %v, want ErrNoResponders", err)
	}
	h.Heal()
	pub(t, a, steps, "healed")
	h.Drain()
	if got := inB.got(); !slices.Equal(got, []string{"from-b", "healed"}) {
		t.Fatalf("after Heal b got %v", got)
	}
	if n := h.Count(memhub.EvDrop, steps); n != 3 {
		t.Fatalf("want 3 partition drops (a->b, a->c, b->a), log:\n%s", h.EventLog())
	}
}

func TestSelectorsByNode(t *testing.T) {
	h := memhub.New(1)
	a, b, c := h.Connect("a"), h.Connect("b"), h.Connect("c")
	inB, inC := sub(t, b, steps), sub(t, c, steps)
	from := h.MustAddFault(memhub.Fault{Kind: memhub.Drop, Match: memhub.Selector{From: []string{"a"}}})
	pub(t, a, steps, "a1")
	pub(t, c, steps, "c1")
	h.Drain()
	if got := inB.got(); !slices.Equal(got, []string{"c1"}) {
		t.Fatalf("From=a drop: b got %v, want only c1", got)
	}
	h.RemoveFault(from)
	h.MustAddFault(memhub.Fault{Kind: memhub.Drop, Match: memhub.Selector{To: []string{"b"}}})
	pub(t, a, steps, "a2")
	h.Drain()
	if got := inB.got(); !slices.Equal(got, []string{"c1"}) {
		t.Fatalf("To=b drop: b got %v", got)
	}
	if got := inC.got(); !slices.Equal(got, []string{"c1", "a2"}) {
		t.Fatalf("To=b drop must not touch c: c got %v", got)
	}
}

func TestSelectorBySubjectPattern(t *testing.T) {
	h := memhub.New(1)
	a, b := h.Connect("a"), h.Connect("b")
	in := sub(t, b, "asyncrl.r.engines.>")
	h.MustAddFault(memhub.Fault{Kind: memhub.Delay, Delay: time.Second, Match: memhub.Selector{Subject: "asyncrl.r.engines.*.health"}})
	pub(t, a, "asyncrl.r.engines.e1.health", "h")
	pub(t, a, "asyncrl.r.engines.e1.load", "l")
	h.Drain()
	if got := in.got(); !slices.Equal(got, []string{"l"}) {
		t.Fatalf("only health is delayed: got %v, want [l] now", got)
	}
	h.Advance(time.Second)
	if got := in.got(); !slices.Equal(got, []string{"l", "h"}) {
		t.Fatalf("after the delay got %v", got)
	}
}

func TestQueueGroupPicksOneReachableMember(t *testing.T) {
	h := memhub.New(11)
	pubr := h.Connect("p")
	nodes := []string{"w1", "w2", "w3"}
	ins := map[string]*inbox{}
	for _, n := range nodes {
		in := &inbox{}
		if _, err := h.Connect(n).QueueSubscribe("asyncrl.r.prompts", "rollout", in.h); err != nil {
			t.Fatal(err)
		}
		ins[n] = in
	}
	const n = 90
	for i := 0; i < n; i++ {
		pub(t, pubr, "asyncrl.r.prompts", fmt.Sprint(i))
	}
	h.Drain()
	total := 0
	for _, name := range nodes {
		k := len(ins[name].got())
		if k == 0 {
			t.Fatalf("member %s never picked in %d messages", name, n)
		}
		total += k
	}
	if total != n {
		t.Fatalf("%d deliveries for %d messages", total, n)
	}
	// Cut w1 and w2 off: w3 must get everything.
	h.Partition([]string{"p", "w3"}, []string{"w1", "w2"})
	before := len(ins["w3"].got())
	for i := 0; i < 10; i++ {
		pub(t, pubr, "asyncrl.r.prompts", "p")
	}
	h.Drain()
	if got := len(ins["w3"].got()) - before; got != 10 {
		t.Fatalf("reachable member got %d of 10", got)
	}
}

func TestRequestReplyDroppedTimesOutInVirtualTime(t *testing.T) {
	h := memhub.New(1)
	h.SetAuto(true)
	h.SetRequestTimeout(2 * time.Second)
	a, b := h.Connect("a"), h.Connect("b")
	if _, err := b.Subscribe("asyncrl.r.control", func(m *transport.Msg) { _ = b.Respond(context.Background(), m, []byte("pong")) }); err != nil {
		t.Fatal(err)
	}
	rep, err := a.Request(context.Background(), "asyncrl.r.control", []byte("ping"))
	if err != nil || string(rep.Data) != "pong" {
		t.Fatalf("request without faults: %v %v", rep, err)
	}
	// Lose every reply.
	h.MustAddFault(memhub.Fault{Kind: memhub.Drop, Match: memhub.Selector{Subject: "_INBOX.>"}})
	done := make(chan error, 1)
	go func() {
		_, err := a.Request(context.Background(), "asyncrl.r.control", []byte("ping"))
		done <- err
	}()
	waitFor(t, func() bool { return h.Count(memhub.EvDrop, "") == 1 })
	h.Advance(2*time.Second - time.Nanosecond)
	select {
	case err := <-done:
		t.Fatalf("request ended before its virtual timeout: %v", err)
	default:
	}
	h.Advance(time.Nanosecond)
	select {
	case err := <-done:
		if !errors.Is(err, transport.ErrTimeout) {
			t.Fatalf("got %v, want ErrTimeout", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("request did not time out after its virtual timeout")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestStreamRedeliveryAfterAckWaitInVirtualTime(t *testing.T) {
	h := memhub.New(1)
	h.SetAuto(true)
	a := h.Connect("a")
	ctx := context.Background()
	st, err := a.Stream(ctx, transport.StreamConfig{Name: "TRAJ", Subjects: []string{"asyncrl.r.trajectories"}})
	if err != nil {
		t.Fatal(err)
	}
	var deliveries []uint64
	var mu sync.Mutex
	s, err := st.Consume(ctx, "filter", 10*time.Second, func(m *transport.StreamMsg) {
		mu.Lock()
		deliveries = append(deliveries, m.Delivered)
		mu.Unlock()
		if m.Delivered == 2 {
			_ = m.Ack()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Unsubscribe()
	// Core publishes on a stream subject are captured too, as in JetStream.
	pub(t, a, "asyncrl.r.trajectories", "t1")
	count := func() []uint64 { mu.Lock(); defer mu.Unlock(); return slices.Clone(deliveries) }
	if got := count(); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("first delivery: %v", got)
	}
	h.Advance(10*time.Second - time.Millisecond)
	if got := count(); len(got) != 1 {
		t.Fatalf("redelivered before ackWait: %v", got)
	}
	h.Advance(time.Millisecond)
	if got := count(); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("after ackWait: %v, want [1 2]", got)
	}
	h.Advance(time.Minute)
	if got := count(); len(got) != 2 {
		t.Fatalf("acked message delivered again: %v", got)
	}
}

func TestStreamLimits(t *testing.T) {
	h := memhub.New(1)
	h.SetAuto(true)
	a := h.Connect("a")
	ctx := context.Background()
	st, err := a.Stream(ctx, transport.StreamConfig{Name: "L", Subjects: []string{"asyncrl.r.ledger"}, MaxAge: time.Minute, MaxBytes: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"aaaa", "bbbb", "cccc"} { // 12 bytes: the first goes
		if _, err := st.Publish(ctx, "asyncrl.r.ledger", []byte(d)); err != nil {
			t.Fatal(err)
		}
	}
	h.Advance(2 * time.Minute)
	if _, err := st.Publish(ctx, "asyncrl.r.ledger", []byte("d")); err != nil { // ages out b and c
		t.Fatal(err)
	}
	var got []string
	s, err := st.Consume(ctx, "x", time.Second, func(m *transport.StreamMsg) { got = append(got, string(m.Data)); _ = m.Ack() })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Unsubscribe()
	if !slices.Equal(got, []string{"d"}) {
		t.Fatalf("after MaxBytes and MaxAge the consumer got %v, want [d]", got)
	}
}

// scenario runs a fixed sequence of calls with random faults on a hub
// seeded with seed and returns its event log.
func scenario(t *testing.T, seed int64) string {
	h := memhub.New(seed)
	a, b, c := h.Connect("a"), h.Connect("b"), h.Connect("c")
	sub(t, b, "asyncrl.r.>")
	for _, n := range []transport.Bus{b, c} {
		if _, err := n.QueueSubscribe("asyncrl.r.prompts", "rollout", func(*transport.Msg) {}); err != nil {
			t.Fatal(err)
		}
	}
	h.MustAddFault(memhub.Fault{Kind: memhub.Drop, Probability: 0.2})
	h.MustAddFault(memhub.Fault{Kind: memhub.Duplicate, Probability: 0.2})
	h.MustAddFault(memhub.Fault{Kind: memhub.Delay, Delay: 50 * time.Millisecond, RandomDelay: true, Probability: 0.5})
	h.MustAddFault(memhub.Fault{Kind: memhub.Reorder, Window: 3, Match: memhub.Selector{Subject: "asyncrl.r.turns"}})
	for i := 0; i < 30; i++ {
		subj := []string{"asyncrl.r.steps", "asyncrl.r.prompts", "asyncrl.r.turns"}[i%3]
		pub(t, a, subj, fmt.Sprint(i))
		if i%5 == 0 {
			h.Advance(10 * time.Millisecond)
		}
	}
	h.Advance(time.Second)
	h.Drain()
	return h.EventLog()
}

func TestSameSeedSameEventLog(t *testing.T) {
	l1, l2 := scenario(t, 42), scenario(t, 42)
	if l1 != l2 {
		t.Fatalf("same seed, different logs:\n%s\n---\n%s", l1, l2)
	}
	if l3 := scenario(t, 43); l3 == l1 {
		t.Fatalf("seeds 42 and 43 gave identical logs; the seed is not used")
	}
	for _, k := range []string{" drop ", " duplicate ", " delay ", " reorder ", " deliver "} {
		if !strings.Contains(l1, k) {
			t.Fatalf("scenario log lacks %q events:\n%s", k, l1)
		}
	}
}

func TestFaultValidation(t *testing.T) {
	h := memhub.New(1)
	for _, f := range []memhub.Fault{
		{},
		{Kind: memhub.Drop, Probability: 1.5},
		{Kind: memhub.Drop, Probability: math.NaN()},
		{Kind: memhub.Duplicate, Copies: -1},
		{Kind: memhub.Delay},
		{Kind: memhub.Reorder, Window: 1},
		{Kind: memhub.Drop, Match: memhub.Selector{Subject: "a..b"}},
	} {
		if _, err := h.AddFault(f); err == nil {
			t.Errorf("AddFault(%+v) accepted an invalid rule", f)
		}
	}
}

func TestRequestEndsWithContextWhenNobodyDrives(t *testing.T) {
	h := memhub.New(1) // manual mode, no driver: the request is never delivered
	a, b := h.Connect("a"), h.Connect("b")
	if _, err := b.Subscribe("asyncrl.r.control", func(m *transport.Msg) { _ = b.Respond(context.Background(), m, nil) }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := a.Request(ctx, "asyncrl.r.control", nil); !errors.Is(err, transport.ErrTimeout) {
		t.Fatalf("got %v, want ErrTimeout from the context deadline", err)
	}
	// The abandoned request's inbox is gone: a late reply is not delivered
	// anywhere and its timer no longer counts as pending work.
	h.Drain()
	if n := h.Count(memhub.EvDeliver, ""); n != 1 {
		t.Fatalf("want only the request itself delivered, log:\n%s", h.EventLog())
	}
}
