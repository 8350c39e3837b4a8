package memhub

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/asyncrl/asyncrl/transport"
)

// defaultAckWait matches JetStream's default.
const defaultAckWait = 30 * time.Second

// memStream is an in-memory durable log shared by every node of the hub,
// like a replicated JetStream stream. Stream storage and delivery to durable
// consumers are not subject to fault rules.
type memStream struct {
	h         *Hub
	cfg       transport.StreamConfig
	msgs      []storedMsg // ascending seq; may start after 1 when limits trimmed it
	lastSeq   uint64
	bytes     int64
	consumers map[string]*consumer
}

type storedMsg struct {
	seq     uint64
	subject string
	data    []byte
	at      time.Time
	// deleted: removed by DeleteMsg while messages before it remain (the
	// slice stays contiguous by sequence; trimLocked drops it once it
	// reaches the front).
	deleted bool
}

type consumer struct {
	st        *memStream
	name      string
	ackWait   time.Duration
	next      uint64            // lowest sequence never handed out
	delivered map[uint64]uint64 // seq -> delivery count, for unacked messages
	acked     map[uint64]bool
	// ready holds sequences due for (re)delivery while no handler was attached.
	ready    []uint64
	deadline map[uint64]*item // seq -> its ack-wait timer
	handlers []*streamSub
	rr       int
}

type streamSub struct {
	c      *consumer
	bus    *Bus
	h      transport.StreamHandler
	active bool
}

type streamDelivery struct {
	c   *consumer
	seq uint64
}

func (h *Hub) streamNames() []string {
	names := make([]string, 0, len(h.streams))
	for n := range h.streams {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (st *memStream) captures(subject string) bool {
	for _, p := range st.cfg.Subjects {
		if transport.SubjectMatches(p, subject) {
			return true
		}
	}
	return false
}

// Stream implements transport.Bus: it creates the named stream or updates
// its configuration. Streams are hub-wide, so every node sees the same log.
func (b *Bus) Stream(ctx context.Context, cfg transport.StreamConfig) (transport.Stream, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("memhub: %w", err)
	}
	h := b.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := b.checkLocked(); err != nil {
		return nil, err
	}
	cfg.Subjects = slices.Clone(cfg.Subjects)
	st, ok := h.streams[cfg.Name]
	if !ok {
		st = &memStream{h: h, consumers: map[string]*consumer{}}
		h.streams[cfg.Name] = st
	}
	st.cfg = cfg
	st.trimLocked()
	return &streamHandle{b: b, st: st}, nil
}

type streamHandle struct {
	b  *Bus
	st *memStream
}

func (s *streamHandle) Name() string { return s.st.cfg.Name }

// Publish appends to the stream (never faulted: JetStream acks only what it
// stored) and, like JetStream, also delivers the message to plain
// subscribers of the subject, through the fault rules.
func (s *streamHandle) Publish(ctx context.Context, subject string, data []byte) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := transport.ValidateSubject(subject); err != nil {
		return 0, err
	}
	h := s.b.h
	h.mu.Lock()
	if err := s.b.checkLocked(); err != nil {
		h.mu.Unlock()
		return 0, err
	}
	if err := s.b.checkPayloadLocked(subject, len(data)); err != nil {
		h.mu.Unlock()
		return 0, err
	}
	if !s.st.captures(subject) {
		h.mu.Unlock()
		return 0, fmt.Errorf("memhub: stream %s does not capture subject %s: %w", s.st.cfg.Name, subject, transport.ErrNoResponders)
	}
	data = bytes.Clone(data)
	seq := s.st.appendLocked(subject, data)
	// Other streams capturing the subject store it too, as in JetStream
	// (which refuses overlapping streams, so normally there are none).
	for _, name := range h.streamNames() {
		if other := h.streams[name]; other != s.st && other.captures(subject) {
			other.appendLocked(subject, data)
		}
	}
	h.routeLocked(s.b.node, &transport.Msg{Subject: subject, Data: data}, false)
	h.mu.Unlock()
	h.kick()
	return seq, nil
}

func (st *memStream) appendLocked(subject string, data []byte) uint64 {
	h := st.h
	st.lastSeq++
	st.msgs = append(st.msgs, storedMsg{seq: st.lastSeq, subject: subject, data: data, at: h.now})
	st.bytes += int64(len(data))
	h.logLocked(Event{Kind: EvStore, Subject: subject, Detail: fmt.Sprintf("%s seq %d", st.cfg.Name, st.lastSeq)})
	st.trimLocked()
	for _, name := range st.consumerNames() {
		st.consumers[name].pumpLocked()
	}
	return st.lastSeq
}

func (st *memStream) consumerNames() []string {
	names := make([]string, 0, len(st.consumers))
	for n := range st.consumers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// trimLocked applies MaxAge (in virtual time) and MaxBytes, oldest first.
func (st *memStream) trimLocked() {
	now := st.h.now
	for len(st.msgs) > 0 {
		m := st.msgs[0]
		old := st.cfg.MaxAge > 0 && now.Sub(m.at) > st.cfg.MaxAge
		big := st.cfg.MaxBytes > 0 && st.bytes > st.cfg.MaxBytes
		if !old && !big && !m.deleted {
			return
		}
		st.bytes -= int64(len(m.data))
		st.msgs = st.msgs[1:]
	}
}

// dropAckedLocked deletes, on a work-queue stream, the acked messages at
// its front (stored messages stay contiguous by sequence, so one acked
// behind an unacked one waits for it).
func (st *memStream) dropAckedLocked(c *consumer) {
	if !st.cfg.WorkQueue {
		return
	}
	for len(st.msgs) > 0 && c.acked[st.msgs[0].seq] {
		delete(c.acked, st.msgs[0].seq)
		st.bytes -= int64(len(st.msgs[0].data))
		st.msgs = st.msgs[1:]
	}
}

// deletedLocked reports whether seq was stored and is gone (trimmed by
// limits or, on a work queue, acked and deleted).
func (st *memStream) deletedLocked(seq uint64) bool {
	first := st.lastSeq + 1
	if len(st.msgs) > 0 {
		first = st.msgs[0].seq
	}
	return seq < first
}

func (st *memStream) get(seq uint64) (storedMsg, bool) {
	if len(st.msgs) == 0 || seq < st.msgs[0].seq || seq > st.lastSeq {
		return storedMsg{}, false
	}
	m := st.msgs[seq-st.msgs[0].seq]
	return m, !m.deleted
}

// Consume implements transport.Stream. Delivery order per consumer is
// stream order, with redeliveries (after ackWait of virtual time, or a Nak)
// queued behind what is already scheduled. Several Consume calls on one
// durable share its messages round-robin. Unsubscribe does not wait for a
// handler that is running.
func (s *streamHandle) Consume(ctx context.Context, durable string, ackWait time.Duration, handler transport.StreamHandler) (transport.Subscription, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := transport.ValidToken(durable); err != nil {
		return nil, fmt.Errorf("memhub: durable name: %w", err)
	}
	if ackWait <= 0 {
		ackWait = defaultAckWait
	}
	h := s.b.h
	h.mu.Lock()
	if err := s.b.checkLocked(); err != nil {
		h.mu.Unlock()
		return nil, err
	}
	c, ok := s.st.consumers[durable]
	if !ok && s.st.cfg.WorkQueue && len(s.st.consumers) > 0 {
		h.mu.Unlock()
		return nil, fmt.Errorf("memhub: stream %s is a work queue read by consumer %s: a second durable (%s) is refused, as JetStream does",
			s.st.cfg.Name, s.st.consumerNames()[0], durable)
	}
	if !ok {
		c = &consumer{st: s.st, name: durable, next: 1, delivered: map[uint64]uint64{}, acked: map[uint64]bool{}, deadline: map[uint64]*item{}}
		s.st.consumers[durable] = c
	}
	c.ackWait = ackWait
	sub := &streamSub{c: c, bus: s.b, h: handler, active: true}
	c.handlers = append(c.handlers, sub)
	ready := c.ready
	c.ready = nil
	for _, seq := range ready {
		h.pushLocked(&item{at: h.now, sd: &streamDelivery{c: c, seq: seq}})
	}
	c.pumpLocked()
	h.mu.Unlock()
	h.kick()
	return sub, nil
}

// pumpLocked schedules every stored message not yet handed to this consumer.
func (c *consumer) pumpLocked() {
	if len(c.handlers) == 0 {
		return
	}
	h := c.st.h
	if len(c.st.msgs) > 0 && c.next < c.st.msgs[0].seq {
		c.next = c.st.msgs[0].seq // trimmed by limits before we got to them
	}
	for ; c.next <= c.st.lastSeq; c.next++ {
		h.pushLocked(&item{at: h.now, sd: &streamDelivery{c: c, seq: c.next}})
	}
}

func (s *streamSub) Unsubscribe() error {
	h := s.c.st.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.active {
		s.active = false
		s.c.handlers = slices.DeleteFunc(s.c.handlers, func(x *streamSub) bool { return x == s })
	}
	return nil
}

func (h *Hub) prepareStreamDeliveryLocked(sd *streamDelivery) func() {
	c := sd.c
	if c.acked[sd.seq] {
		return nil
	}
	m, ok := c.st.get(sd.seq)
	if !ok {
		delete(c.delivered, sd.seq) // trimmed away by limits
		return nil
	}
	if len(c.handlers) == 0 {
		c.ready = append(c.ready, sd.seq)
		return nil
	}
	sub := c.handlers[c.rr%len(c.handlers)]
	c.rr++
	c.delivered[sd.seq]++
	n := c.delivered[sd.seq]
	if t := c.deadline[sd.seq]; t != nil {
		t.cancelled = true
	}
	seq := sd.seq
	c.deadline[seq] = h.timerLocked(c.ackWait, func() {
		delete(c.deadline, seq)
		if c.acked[seq] {
			return
		}
		h.logLocked(Event{Kind: EvAckTimeout, Subject: m.subject, To: sub.bus.node, Detail: fmt.Sprintf("%s/%s seq %d", c.st.cfg.Name, c.name, seq)})
		h.pushLocked(&item{at: h.now, sd: &streamDelivery{c: c, seq: seq}})
	})
	h.logLocked(Event{Kind: EvStreamDeliver, Subject: m.subject, To: sub.bus.node, Detail: fmt.Sprintf("%s/%s seq %d delivered %d", c.st.cfg.Name, c.name, seq, n)})
	ack := func() error {
		h.mu.Lock()
		defer h.mu.Unlock()
		if c.acked[seq] || c.st.deletedLocked(seq) {
			return nil
		}
		c.acked[seq] = true
		delete(c.delivered, seq)
		defer c.st.dropAckedLocked(c)
		if t := c.deadline[seq]; t != nil {
			t.cancelled = true
			delete(c.deadline, seq)
		}
		h.logLocked(Event{Kind: EvAck, Subject: m.subject, From: sub.bus.node, Detail: fmt.Sprintf("%s/%s seq %d", c.st.cfg.Name, c.name, seq)})
		return nil
	}
	nak := func(delay time.Duration) error {
		h.mu.Lock()
		if c.acked[seq] {
			h.mu.Unlock()
			return nil
		}
		if t := c.deadline[seq]; t != nil {
			t.cancelled = true
			delete(c.deadline, seq)
		}
		detail := fmt.Sprintf("%s/%s seq %d", c.st.cfg.Name, c.name, seq)
		if delay > 0 {
			detail += " delay " + delay.String()
		}
		h.logLocked(Event{Kind: EvNak, Subject: m.subject, From: sub.bus.node, Detail: detail})
		if delay <= 0 {
			h.pushLocked(&item{at: h.now, sd: &streamDelivery{c: c, seq: seq}})
		} else {
			// As JetStream's NakWithDelay: the message comes back after
			// delay of virtual time (an ack before that cancels it).
			c.deadline[seq] = h.timerLocked(delay, func() {
				delete(c.deadline, seq)
				if !c.acked[seq] {
					h.pushLocked(&item{at: h.now, sd: &streamDelivery{c: c, seq: seq}})
				}
			})
		}
		h.mu.Unlock()
		h.kick()
		return nil
	}
	msg := transport.NewStreamMsg(m.subject, m.data, seq, n, ack, nak)
	handler := sub.h
	return func() { handler(msg) }
}

var _ transport.StoredReader = (*streamHandle)(nil)

// GetMsg implements transport.StoredReader: the message stored at seq, or
// transport.ErrNoMessage when it was never stored, was deleted or was
// trimmed by the stream's limits. Like stream storage, it is not subject
// to fault rules.
func (s *streamHandle) GetMsg(ctx context.Context, seq uint64) (transport.StoredMsg, error) {
	if err := ctx.Err(); err != nil {
		return transport.StoredMsg{}, err
	}
	h := s.b.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := s.b.checkLocked(); err != nil {
		return transport.StoredMsg{}, err
	}
	m, ok := s.st.get(seq)
	if !ok {
		return transport.StoredMsg{}, fmt.Errorf("memhub: stream %s seq %d: %w", s.st.cfg.Name, seq, transport.ErrNoMessage)
	}
	return transport.StoredMsg{Subject: m.subject, Sequence: m.seq, Data: bytes.Clone(m.data)}, nil
}

// DeleteMsg implements transport.StoredReader. A message deleted before
// delivery is never delivered (as in JetStream); a sequence already gone
// is not an error.
func (s *streamHandle) DeleteMsg(ctx context.Context, seq uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	h := s.b.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := s.b.checkLocked(); err != nil {
		return err
	}
	st := s.st
	if _, ok := st.get(seq); !ok {
		return nil
	}
	i := seq - st.msgs[0].seq
	st.bytes -= int64(len(st.msgs[i].data))
	st.msgs[i].deleted, st.msgs[i].data = true, nil
	h.logLocked(Event{Kind: EvStore, Subject: st.msgs[i].subject, Detail: fmt.Sprintf("%s seq %d deleted", st.cfg.Name, seq)})
	st.trimLocked()
	return nil
}
