package memhub

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/asyncrl/asyncrl/transport"
)

// Bus is one node's view of the hub; it implements transport.Bus.
type Bus struct {
	h      *Hub
	node   string
	closed bool // guarded by h.mu
}

var _ transport.Bus = (*Bus)(nil)

// Node is the name this bus was connected with.
func (b *Bus) Node() string { return b.node }

// Hub is the hub this bus belongs to.
func (b *Bus) Hub() *Hub { return b.h }

// Now is the hub's virtual time (the conformance suite uses it to wait in
// virtual time).
func (b *Bus) Now() time.Time { return b.h.Now() }

type subscription struct {
	id     uint64
	bus    *Bus
	node   string
	subj   string
	queue  string
	h      transport.Handler
	active bool // guarded by h.mu
	inbox  bool // a Request's private reply subscription
	// literal: subj has no wildcard, so it matches exactly itself (a
	// string compare instead of a token walk on every publish).
	literal bool
}

// matches reports whether the subscription's subject matches subject.
func (s *subscription) matches(subject string) bool {
	if s.literal {
		return s.subj == subject
	}
	return transport.SubjectMatches(s.subj, subject)
}

type delivery struct {
	id   uint64
	msg  *transport.Msg
	from string
	sub  *subscription
	copy int
	at   time.Time
}

func (s *subscription) Unsubscribe() error {
	h := s.bus.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.active {
		s.active = false
		h.removeSubLocked(s.id)
	}
	return nil
}

func (h *Hub) prepareDeliveryLocked(d *delivery) run {
	s := d.sub
	if !s.active {
		return run{}
	}
	detail := ""
	if d.copy > 0 {
		detail = fmt.Sprintf("copy %d", d.copy)
	}
	h.logLocked(Event{Kind: EvDeliver, Msg: d.id, Subject: d.msg.Subject, From: d.from, To: s.node, Sub: s.id, Detail: detail})
	m := new(transport.Msg)
	*m = *d.msg // each delivery gets its own Msg; Data is shared read-only
	return run{h: s.h, m: m}
}

func (b *Bus) checkLocked() error {
	if b.closed {
		return transport.ErrClosed
	}
	return nil
}

func (b *Bus) checkPayloadLocked(subject string, n int) error {
	if n > b.h.maxPayload {
		return fmt.Errorf("%w: %d bytes on %s exceeds the hub's max payload of %d bytes", transport.ErrPayloadTooLarge, n, subject, b.h.maxPayload)
	}
	return nil
}

// MaxPayload implements transport.Bus.
func (b *Bus) MaxPayload() int {
	b.h.mu.Lock()
	defer b.h.mu.Unlock()
	return b.h.maxPayload
}

// Publish implements transport.Bus. The message is queued for every
// matching subscription, through the fault rules; in auto mode it is
// delivered before Publish returns.
func (b *Bus) Publish(ctx context.Context, subject string, data []byte) error {
	return b.publish(ctx, subject, "", data)
}

func (b *Bus) publish(ctx context.Context, subject, reply string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := transport.ValidateSubject(subject); err != nil {
		return err
	}
	h := b.h
	h.mu.Lock()
	if err := b.checkLocked(); err != nil {
		h.mu.Unlock()
		return err
	}
	if err := b.checkPayloadLocked(subject, len(data)); err != nil {
		h.mu.Unlock()
		return err
	}
	h.routeLocked(b.node, &transport.Msg{Subject: subject, Reply: reply, Data: bytes.Clone(data)}, true)
	h.mu.Unlock()
	h.kick()
	return nil
}

// routeLocked fans a message out to the matching subscriptions (one member
// per queue group, chosen with the seeded rng among reachable members) and
// into matching streams when capture is set. It returns how many
// subscriptions were reachable: the request path's notion of interest.
func (h *Hub) routeLocked(from string, m *transport.Msg, capture bool) int {
	h.nextMsg++
	id := h.nextMsg
	h.logLocked(Event{Kind: EvPublish, Msg: id, Subject: m.Subject, From: from})
	if capture {
		for _, name := range h.streamNames() {
			if st := h.streams[name]; st.captures(m.Subject) {
				st.appendLocked(m.Subject, m.Data)
			}
		}
	}
	var plain []*subscription
	var groups map[string][]*subscription
	var groupNames []string
	for _, s := range h.subsInOrderLocked() {
		if !s.matches(m.Subject) {
			continue
		}
		if s.queue == "" {
			plain = append(plain, s)
			continue
		}
		if groups == nil {
			groups = map[string][]*subscription{}
		}
		if _, ok := groups[s.queue]; !ok {
			groupNames = append(groupNames, s.queue)
		}
		groups[s.queue] = append(groups[s.queue], s)
	}
	reachable := 0
	for _, s := range plain {
		if h.reachableLocked(from, s.node) {
			reachable++
		}
		h.applyFaultsLocked(&delivery{id: id, msg: m, from: from, sub: s})
	}
	sort.Strings(groupNames)
	for _, g := range groupNames {
		var members []*subscription
		for _, s := range groups[g] {
			if h.reachableLocked(from, s.node) {
				members = append(members, s)
			}
		}
		if len(members) == 0 {
			// Nobody reachable: the partition eats it, as it would in NATS.
			s := groups[g][0]
			h.applyFaultsLocked(&delivery{id: id, msg: m, from: from, sub: s})
			continue
		}
		reachable++
		pick := members[0]
		if len(members) > 1 {
			pick = members[h.rng.Intn(len(members))]
		}
		h.applyFaultsLocked(&delivery{id: id, msg: m, from: from, sub: pick})
	}
	return reachable
}

// Subscribe implements transport.Bus.
func (b *Bus) Subscribe(subject string, h transport.Handler) (transport.Subscription, error) {
	return b.subscribe(subject, "", h)
}

// QueueSubscribe implements transport.Bus.
func (b *Bus) QueueSubscribe(subject, queue string, h transport.Handler) (transport.Subscription, error) {
	if err := transport.ValidToken(queue); err != nil {
		return nil, fmt.Errorf("queue name: %w", err)
	}
	return b.subscribe(subject, queue, h)
}

func (b *Bus) subscribe(subject, queue string, handler transport.Handler) (transport.Subscription, error) {
	if err := transport.ValidatePattern(subject); err != nil {
		return nil, err
	}
	if handler == nil {
		return nil, errors.New("memhub: nil handler")
	}
	h := b.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := b.checkLocked(); err != nil {
		return nil, err
	}
	return h.addSubLocked(b, subject, queue, handler, false), nil
}

func (h *Hub) addSubLocked(b *Bus, subject, queue string, handler transport.Handler, inbox bool) *subscription {
	h.nextSub++
	s := &subscription{id: h.nextSub, bus: b, node: b.node, subj: subject, queue: queue, h: handler, active: true, inbox: inbox,
		literal: !strings.ContainsAny(subject, "*>")}
	h.subs[s.id] = s
	h.subOrder = nil
	return s
}

// removeSubLocked forgets a subscription.
func (h *Hub) removeSubLocked(id uint64) {
	delete(h.subs, id)
	h.subOrder = nil
}

// subsInOrderLocked is every subscription in id order (map order is
// random; deliveries must not be), rebuilt only after the set changed:
// every publish walks it.
func (h *Hub) subsInOrderLocked() []*subscription {
	if h.subOrder != nil {
		return h.subOrder
	}
	order := make([]*subscription, 0, len(h.subs)+1) // never nil once built
	for _, s := range h.subs {
		order = append(order, s)
	}
	slices.SortFunc(order, func(a, b *subscription) int { return cmp.Compare(a.id, b.id) })
	h.subOrder = order
	return order
}

type reqResult struct {
	m   *transport.Msg
	err error
}

// Request implements transport.Bus. The request and its reply go through
// the fault rules; a lost request or reply ends with transport.ErrTimeout
// after the hub's request timeout in virtual time (someone must Advance the
// clock), or when ctx ends. With no reachable subscriber it fails at once
// with transport.ErrNoResponders. Do not call it from inside a handler: the
// reply could only be delivered by the run that is blocked in the handler.
func (b *Bus) Request(ctx context.Context, subject string, data []byte) (*transport.Msg, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := transport.ValidateSubject(subject); err != nil {
		return nil, err
	}
	h := b.h
	h.mu.Lock()
	if err := b.checkLocked(); err != nil {
		h.mu.Unlock()
		return nil, err
	}
	if err := b.checkPayloadLocked(subject, len(data)); err != nil {
		h.mu.Unlock()
		return nil, err
	}
	h.nextInbox++
	inbox := fmt.Sprintf("_INBOX.%s.%d", b.node, h.nextInbox)
	res := make(chan reqResult, 1)
	sub := h.addSubLocked(b, inbox, "", func(m *transport.Msg) {
		select {
		case res <- reqResult{m: m}:
		default: // a duplicate reply; the first one won
		}
	}, true)
	if n := h.routeLocked(b.node, &transport.Msg{Subject: subject, Reply: inbox, Data: bytes.Clone(data)}, true); n == 0 {
		sub.active = false
		h.removeSubLocked(sub.id)
		h.logLocked(Event{Kind: EvNoResponders, Subject: subject, From: b.node})
		h.mu.Unlock()
		return nil, fmt.Errorf("memhub: request %s: %w", subject, transport.ErrNoResponders)
	}
	timeout := h.requestTimeout
	timer := h.timerLocked(timeout, func() {
		select {
		case res <- reqResult{err: fmt.Errorf("memhub: request %s: no reply within %s of virtual time: %w", subject, timeout, transport.ErrTimeout)}:
			h.logLocked(Event{Kind: EvTimeout, Subject: subject, From: b.node})
		default:
		}
	})
	h.mu.Unlock()
	h.kick()

	var r reqResult
	select {
	case r = <-res:
	case <-ctx.Done():
		r.err = fmt.Errorf("memhub: request %s: %w", subject, ctx.Err())
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			r.err = fmt.Errorf("memhub: request %s: %w: %w", subject, transport.ErrTimeout, ctx.Err())
		}
	}
	h.mu.Lock()
	timer.cancelled = true
	sub.active = false
	h.removeSubLocked(sub.id)
	h.mu.Unlock()
	return r.m, r.err
}

// Respond implements transport.Bus: it publishes data to the request's
// reply inbox from this node, through the fault rules.
func (b *Bus) Respond(ctx context.Context, req *transport.Msg, data []byte) error {
	if req == nil || req.Reply == "" {
		return errors.New("memhub: respond: message has no reply subject")
	}
	return b.publish(ctx, req.Reply, "", data)
}

// Close detaches the node's subscriptions and durable consumers. Deliveries
// already queued for them are discarded. It is safe to call twice.
func (b *Bus) Close() error {
	h := b.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	for id, s := range h.subs {
		if s.bus == b {
			s.active = false
			h.removeSubLocked(id)
		}
	}
	for _, st := range h.streams {
		for _, c := range st.consumers {
			c.handlers = slices.DeleteFunc(c.handlers, func(s *streamSub) bool {
				if s.bus == b {
					s.active = false
					return true
				}
				return false
			})
		}
	}
	return nil
}

// Subscriptions lists the subjects (or patterns) of the hub's open
// subscriptions, sorted and without repeats; request inboxes are left
// out. A test reads what a system listens on (sim's test that its
// subjects are the run's plan).
func (h *Hub) Subscriptions() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, s := range h.subs {
		if !s.inbox {
			out = append(out, s.subj)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
