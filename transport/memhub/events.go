package memhub

import (
	"fmt"
	"strings"
	"time"
)

// EventKind names what happened to a message in the hub.
type EventKind string

// Event kinds recorded in the hub's log.
const (
	// EvPublish: a node published a message (one per Publish/Respond/Request).
	EvPublish EventKind = "publish"
	// EvDeliver: a message reached a subscription's handler.
	EvDeliver EventKind = "deliver"
	// EvDrop: a delivery was lost (a drop fault or a partition; Detail says which).
	EvDrop EventKind = "drop"
	// EvDuplicate: a delivery was copied by a duplicate fault.
	EvDuplicate EventKind = "duplicate"
	// EvDelay: a delivery was postponed by a delay fault.
	EvDelay EventKind = "delay"
	// EvReorder: a reorder window was shuffled and released.
	EvReorder EventKind = "reorder"
	// EvNoResponders: a request found no reachable subscriber.
	EvNoResponders EventKind = "no-responders"
	// EvTimeout: a request's virtual timeout fired before a reply arrived.
	EvTimeout EventKind = "timeout"
	// EvStore: a message was appended to a stream.
	EvStore EventKind = "store"
	// EvStreamDeliver: a stored message reached a durable consumer (Detail has
	// the delivery count).
	EvStreamDeliver EventKind = "stream-deliver"
	// EvAck and EvNak: a durable consumer acknowledged or refused a message.
	EvAck EventKind = "ack"
	EvNak EventKind = "nak"
	// EvAckTimeout: a delivered message was not acked within ackWait and is
	// due for redelivery.
	EvAckTimeout EventKind = "ack-timeout"
)

// Event is one entry of the hub's log. Events are recorded in the order the
// hub decides them, so two runs with the same seed and the same calls produce
// identical logs.
type Event struct {
	// At is virtual time since the hub started.
	At time.Duration
	// Kind of event.
	Kind EventKind
	// Msg is the hub-wide message id (1, 2, …) assigned at publish; 0 if none.
	Msg uint64
	// Subject of the message (or the stream name for stream events).
	Subject string
	// From is the publishing node; To the receiving node ("" when not known).
	From, To string
	// Sub is the receiving subscription's id (0 when none).
	Sub uint64
	// Detail says more: the fault rule, a delay, a stream sequence.
	Detail string
}

// String renders the event deterministically, one line, for golden files.
func (e Event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", e.At, e.Kind)
	if e.Msg != 0 {
		fmt.Fprintf(&b, " #%d", e.Msg)
	}
	if e.Subject != "" {
		fmt.Fprintf(&b, " %s", e.Subject)
	}
	if e.From != "" || e.To != "" {
		fmt.Fprintf(&b, " %s->%s", e.From, e.To)
	}
	if e.Sub != 0 {
		fmt.Fprintf(&b, " sub=%d", e.Sub)
	}
	if e.Detail != "" {
		fmt.Fprintf(&b, " (%s)", e.Detail)
	}
	return b.String()
}

func (h *Hub) logLocked(e Event) {
	if h.noRecord {
		return
	}
	e.At = h.now.Sub(h.start)
	h.events = append(h.events, e)
}

// Events returns a copy of the log so far.
func (h *Hub) Events() []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Event(nil), h.events...)
}

// EventLog renders the log, one event a line.
func (h *Hub) EventLog() string {
	var b strings.Builder
	for _, e := range h.Events() {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// Count returns how many events of kind are in the log for subject (any
// subject when subject is "").
func (h *Hub) Count(kind EventKind, subject string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, e := range h.events {
		if e.Kind == kind && (subject == "" || e.Subject == subject) {
			n++
		}
	}
	return n
}
