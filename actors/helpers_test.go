package actors

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/internal/syncbuf"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// protoactor's dead-letter throttle parks a goroutine on a 1s ticker
		// after a dead letter; it ends by itself and is not ours.
		goleak.IgnoreAnyFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1"),
	)
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// ---- example core ---------------------------------------------------------

// cmsg is the example core's input.
type cmsg struct {
	N     int
	Panic bool
	// Block parks Step until the recorder's gate opens (mailbox tests only).
	Block bool
}

// cout is the example core's output.
type cout struct {
	Kind  string
	Count int
}

// recorder observes cores across incarnations. It is test plumbing, shared
// with the test goroutine, so it locks; the core itself stays pure.
type recorder struct {
	mu      sync.Mutex
	steps   []int    // N of every stepped message, all incarnations
	counts  []int    // the core's own count after each step
	ticks   []string // timer names ticked
	tickAt  []time.Time
	started []time.Time
	gate    chan struct{}
	entered chan struct{}
}

func newRecorder() *recorder {
	return &recorder{gate: make(chan struct{}), entered: make(chan struct{}, 16)}
}

func (r *recorder) snapshot() (steps, counts []int, ticks []string, tickAt []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.steps...), append([]int(nil), r.counts...),
		append([]string(nil), r.ticks...), append([]time.Time(nil), r.tickAt...)
}

// counterCore counts messages, sends a "batch" every `every` messages and
// arms a "flush" timer a second later; the tick sends a "flush".
type counterCore struct {
	Effects[cout]
	every int
	count int
	rec   *recorder
}

var (
	_ Core[cmsg, cout] = (*counterCore)(nil)
	_ Starter          = (*counterCore)(nil)
)

func (c *counterCore) Start(now time.Time) {
	c.rec.mu.Lock()
	c.rec.started = append(c.rec.started, now)
	c.rec.mu.Unlock()
}

func (c *counterCore) Step(now time.Time, in cmsg) {
	if in.Panic {
		panic("boom " + strconv.Itoa(in.N))
	}
	if in.Block {
		c.rec.entered <- struct{}{}
		<-c.rec.gate
	}
	c.count++
	c.rec.mu.Lock()
	c.rec.steps = append(c.rec.steps, in.N)
	c.rec.counts = append(c.rec.counts, c.count)
	c.rec.mu.Unlock()
	c.Count("asyncrl_test_steps_total", 1)
	if c.count%c.every == 0 {
		c.Send("out.batch", cout{Kind: "batch", Count: c.count})
		c.SetTimer("flush", now.Add(time.Second))
		c.Log(LevelWarn, "batch", "batch done", Field{Key: "count", Value: strconv.Itoa(c.count)})
	}
}

func (c *counterCore) Tick(now time.Time, name string) {
	c.rec.mu.Lock()
	c.rec.ticks = append(c.rec.ticks, name)
	c.rec.tickAt = append(c.rec.tickAt, now)
	c.rec.mu.Unlock()
	c.Send("out.flush", cout{Kind: name, Count: c.count})
}

func counterFactory(rec *recorder, every int) func() Core[cmsg, cout] {
	return func() Core[cmsg, cout] { return &counterCore{every: every, rec: rec} }
}

// sendRec records Send effects.
type sendRec struct {
	mu   sync.Mutex
	sent []Send[cout]
	fail error
}

func (s *sendRec) Send(_ context.Context, subject string, msg cout) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	s.sent = append(s.sent, Send[cout]{Subject: subject, Msg: msg})
	return nil
}

func (s *sendRec) get() []Send[cout] {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Send[cout](nil), s.sent...)
}

// ---- harness --------------------------------------------------------------

// syncBuf is a goroutine-safe log sink that counts what it holds.
type syncBuf struct{ syncbuf.Buffer }

func (s *syncBuf) count(substr string) int { return strings.Count(s.String(), substr) }

type harness struct {
	sys   *System
	clock *ManualClock
	reg   *prometheus.Registry
	logs  *syncBuf
}

func newHarness(t *testing.T, mut ...func(*SystemConfig)) *harness {
	t.Helper()
	h := &harness{clock: NewManualClock(t0), reg: prometheus.NewRegistry(), logs: &syncBuf{}}
	cfg := DefaultSystemConfig()
	cfg.Clock = h.clock
	cfg.Registerer = h.reg
	cfg.RunID = "run-1"
	cfg.Logger = zerolog.New(h.logs)
	for _, f := range mut {
		f(&cfg)
	}
	sys, err := NewSystem(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.sys = sys
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := sys.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return h
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// ---- fake bus -------------------------------------------------------------

// fakeBus is the smallest transport.Bus the bridge tests need: exact-subject
// fan-out, synchronous delivery on the publisher's goroutine.
type fakeBus struct {
	mu      sync.Mutex
	subs    map[int]fakeSub
	next    int
	publish []transport.Msg
}

type fakeSub struct {
	subject, queue string
	h              transport.Handler
}

type fakeSubscription struct {
	bus *fakeBus
	id  int
}

func (s fakeSubscription) Unsubscribe() error {
	s.bus.mu.Lock()
	defer s.bus.mu.Unlock()
	delete(s.bus.subs, s.id)
	return nil
}

var _ transport.Bus = (*fakeBus)(nil)

func newFakeBus() *fakeBus { return &fakeBus{subs: map[int]fakeSub{}} }

func (b *fakeBus) Publish(_ context.Context, subject string, data []byte) error {
	b.mu.Lock()
	b.publish = append(b.publish, transport.Msg{Subject: subject, Data: append([]byte(nil), data...)})
	var hs []transport.Handler
	queues := map[string]bool{}
	for id := 0; id < b.next; id++ {
		s, ok := b.subs[id]
		if !ok || s.subject != subject {
			continue
		}
		if s.queue != "" {
			if queues[s.queue] {
				continue
			}
			queues[s.queue] = true
		}
		hs = append(hs, s.h)
	}
	b.mu.Unlock()
	for _, h := range hs {
		h(&transport.Msg{Subject: subject, Data: data})
	}
	return nil
}

func (b *fakeBus) sub(subject, queue string, h transport.Handler) (transport.Subscription, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	id := b.next
	b.next++
	b.subs[id] = fakeSub{subject: subject, queue: queue, h: h}
	return fakeSubscription{bus: b, id: id}, nil
}

func (b *fakeBus) Subscribe(subject string, h transport.Handler) (transport.Subscription, error) {
	return b.sub(subject, "", h)
}

func (b *fakeBus) QueueSubscribe(subject, queue string, h transport.Handler) (transport.Subscription, error) {
	return b.sub(subject, queue, h)
}

func (b *fakeBus) Request(context.Context, string, []byte) (*transport.Msg, error) {
	return nil, transport.ErrNoResponders
}

func (b *fakeBus) Respond(context.Context, *transport.Msg, []byte) error { return nil }

func (b *fakeBus) Stream(context.Context, transport.StreamConfig) (transport.Stream, error) {
	return nil, errors.New("fakeBus: no streams")
}

func (b *fakeBus) MaxPayload() int { return 1 << 20 }
func (b *fakeBus) Close() error    { return nil }

func (b *fakeBus) subscriptions() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.subs)
}

func (b *fakeBus) published() []transport.Msg {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]transport.Msg(nil), b.publish...)
}

// fakeStream delivers each Publish to its one consumer synchronously and
// records acks; redelivery is driven by the test with redeliver.
type fakeStream struct {
	mu     sync.Mutex
	msgs   [][]byte
	acked  map[uint64]bool
	naks   []fakeNak
	h      transport.StreamHandler
	closed bool
}

var _ transport.Stream = (*fakeStream)(nil)

func newFakeStream() *fakeStream { return &fakeStream{acked: map[uint64]bool{}} }

func (s *fakeStream) Name() string { return "S" }

func (s *fakeStream) Publish(_ context.Context, subject string, data []byte) (uint64, error) {
	s.mu.Lock()
	s.msgs = append(s.msgs, append([]byte(nil), data...))
	seq := uint64(len(s.msgs))
	h := s.h
	s.mu.Unlock()
	if h != nil {
		s.deliver(h, subject, seq)
	}
	return seq, nil
}

func (s *fakeStream) deliver(h transport.StreamHandler, subject string, seq uint64) {
	s.mu.Lock()
	data := s.msgs[seq-1]
	s.mu.Unlock()
	ack := func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.acked[seq] = true
		return nil
	}
	nak := func(d time.Duration) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.naks = append(s.naks, fakeNak{seq, d})
		return nil
	}
	h(transport.NewStreamMsg(subject, data, seq, 1, ack, nak))
}

// redeliver hands every unacked message to the consumer again.
func (s *fakeStream) redeliver() {
	s.mu.Lock()
	h := s.h
	var seqs []uint64
	for i := range s.msgs {
		if !s.acked[uint64(i+1)] {
			seqs = append(seqs, uint64(i+1))
		}
	}
	s.mu.Unlock()
	for _, seq := range seqs {
		s.deliver(h, "s.in", seq)
	}
}

// fakeNak is one refusal: the message and the delay asked for.
type fakeNak struct {
	seq   uint64
	delay time.Duration
}

func (s *fakeStream) nakked() []fakeNak {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.naks)
}

func (s *fakeStream) isAcked(seq uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acked[seq]
}

func (s *fakeStream) Consume(_ context.Context, _ string, _ time.Duration, h transport.StreamHandler) (transport.Subscription, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.h = h
	return streamSub{s}, nil
}

type streamSub struct{ s *fakeStream }

func (u streamSub) Unsubscribe() error {
	u.s.mu.Lock()
	defer u.s.mu.Unlock()
	u.s.h = nil
	u.s.closed = true
	return nil
}

// decodeCmsg parses "N" (a number) or "pN" (a message that panics).
func decodeCmsg(data []byte) (cmsg, error) {
	s := string(data)
	panics := strings.HasPrefix(s, "p")
	n, err := strconv.Atoi(strings.TrimPrefix(s, "p"))
	if err != nil {
		return cmsg{}, err
	}
	return cmsg{N: n, Panic: panics}, nil
}

func encodeCout(c cout) ([]byte, error) {
	if c.Kind == "" {
		return nil, errors.New("empty kind")
	}
	return []byte(c.Kind + ":" + strconv.Itoa(c.Count)), nil
}
