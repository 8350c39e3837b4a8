package transport

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Msg is one message delivered by a Bus.
type Msg struct {
	// Subject the message was published on.
	Subject string
	// Reply is the inbox a responder answers on (request/reply); empty otherwise.
	Reply string
	// Data is the payload (a messages envelope for control traffic). Receivers
	// must not retain it past the handler unless they copy it.
	Data []byte
	// Header carries optional metadata (e.g. the sender node); may be nil.
	Header map[string]string
	// Inline is set by a Bus that calls this handler on the publisher's
	// goroutine, inside its Publish (memhub in auto mode). Such a handler
	// must not wait for anything the publisher does after Publish returns:
	// the publisher may be the very actor whose mailbox the handler would
	// wait on (actors' bridges admit over the mailbox bound instead).
	Inline bool
}

// Handler receives messages for a subscription. Handlers of one subscription
// are called sequentially, in delivery order.
type Handler func(m *Msg)

// Subscription is an active interest in a subject.
type Subscription interface {
	// Unsubscribe stops delivery; it is safe to call more than once.
	Unsubscribe() error
}

// Bus is the small message-bus interface every actor talks through. The NATS
// implementation carries it between processes and nodes; the in-memory hub
// carries it inside one process with injectable faults.
type Bus interface {
	// Publish sends data on subject (fire and forget).
	Publish(ctx context.Context, subject string, data []byte) error
	// Subscribe delivers every message on subject (wildcards '*' and '>' allowed).
	Subscribe(subject string, h Handler) (Subscription, error)
	// QueueSubscribe delivers each message on subject to exactly one member of queue.
	QueueSubscribe(subject, queue string, h Handler) (Subscription, error)
	// Request publishes data and waits for one reply, until ctx ends. It
	// fails at once with ErrNoResponders when nobody subscribes, and with
	// ErrTimeout when ctx's deadline (memhub: its virtual request timeout)
	// passes first.
	Request(ctx context.Context, subject string, data []byte) (*Msg, error)
	// Respond answers a request message.
	Respond(ctx context.Context, req *Msg, data []byte) error
	// Stream opens a durable stream, creating it or updating its
	// configuration to cfg.
	Stream(ctx context.Context, cfg StreamConfig) (Stream, error)
	// MaxPayload is the largest payload Publish accepts, in bytes.
	MaxPayload() int
	// Close drains subscriptions and releases resources.
	Close() error
}

// StreamConfig describes a durable stream: state that must survive a process
// restart (the trajectory buffer, the prompt ledger, versions).
type StreamConfig struct {
	// Name of the stream (letters, digits, '-' and '_').
	Name string
	// Subjects captured by the stream.
	Subjects []string
	// MaxAge drops messages older than this; 0 keeps them forever.
	MaxAge time.Duration
	// MaxBytes bounds the stream's size; 0 is unbounded.
	MaxBytes int64
	// Memory keeps the stream in memory instead of on disk (tests, and
	// buffers that only have to outlive the actors, not the servers).
	Memory bool
	// Replicas is the stream's replication factor on a clustered bus
	// (1..5; 0 means 1): with 3, the stream and its consumers survive the
	// loss of any one server (a new leader is elected among the others).
	// A bus without servers of its own (memhub) ignores it.
	Replicas int
	// MinReplicas, when set (1..Replicas), lets a new stream be created
	// with fewer copies when the cluster has too few servers up to place
	// Replicas of them (JetStream: "no suitable peers for placement"):
	// one fewer at a time, down to MinReplicas. A term's own streams set
	// it, so a cluster that lost a server can start a term at all (the
	// next term, once the servers are back, gets every copy again); the
	// stream's health (Replicas) says what it got.
	MinReplicas int
	// WorkQueue deletes a message once a consumer acked it (JetStream's
	// work-queue retention), instead of keeping it until MaxAge/MaxBytes;
	// only one durable consumer may read the stream. For buffers that are
	// consumed once (the trajectory buffer: each group judged by the
	// sampling actor): otherwise a run holds every acked group for MaxAge.
	// An existing stream created without it keeps its retention (JetStream
	// cannot change a stream's retention to or from work-queue).
	WorkQueue bool
	// Duplicates is how long the stream remembers a message id
	// (PublishMsgID) to drop a second message with it: JetStream's
	// duplicate window; 0 is the server's default (2 minutes). Each id
	// costs the server memory for the window, so it bounds per-message
	// state by time. A bus without message ids (memhub) ignores it.
	Duplicates time.Duration
	// SmallBlocks asks for the server's 4 MB file blocks instead of the
	// 8 MB it gives a stream without a size or count limit. For an
	// append-only log written for days (the prompt ledger): the server
	// keeps the block being written in a write cache drawn from a pool
	// tiered by size, so a log's steady-state cost is one buffer of its
	// block size — 8 MB where 4 MB would do, and it reaches that tier
	// only once its block passes 4 MB, hours into a run. A bus whose
	// server sizes blocks otherwise (memhub, memory streams) ignores it.
	SmallBlocks bool
}

// Validate names the first bad field: a Name that is not a subject token,
// no Subjects, a subject that is not a valid pattern, a negative MaxAge or
// MaxBytes. Every Bus's Stream checks it, so both buses refuse the same
// configurations with the same words.
func (c StreamConfig) Validate() error {
	if err := ValidToken(c.Name); err != nil {
		return fmt.Errorf("stream name: %w", err)
	}
	if len(c.Subjects) == 0 {
		return fmt.Errorf("stream %s: Subjects is empty (want at least one subject pattern)", c.Name)
	}
	for _, s := range c.Subjects {
		if err := ValidatePattern(s); err != nil {
			return fmt.Errorf("stream %s: %w", c.Name, err)
		}
	}
	if c.MaxAge < 0 {
		return fmt.Errorf("stream %s: MaxAge %v: must be >= 0 (0 is unlimited)", c.Name, c.MaxAge)
	}
	if c.MaxBytes < 0 {
		return fmt.Errorf("stream %s: MaxBytes %d: must be >= 0 (0 is unlimited)", c.Name, c.MaxBytes)
	}
	if c.Duplicates < 0 {
		return fmt.Errorf("stream %s: Duplicates %v: must be >= 0 (0 is the server's default)", c.Name, c.Duplicates)
	}
	if c.Replicas < 0 || c.Replicas > 5 {
		return fmt.Errorf("stream %s: Replicas %d: allowed 1..5 (0 for 1)", c.Name, c.Replicas)
	}
	if c.MinReplicas < 0 || c.MinReplicas > max(1, c.Replicas) {
		return fmt.Errorf("stream %s: MinReplicas %d: allowed 0..Replicas (%d)", c.Name, c.MinReplicas, max(1, c.Replicas))
	}
	return nil
}

// Stream is a durable, ordered log of messages with acknowledged consumers.
type Stream interface {
	// Publish appends data on subject and returns its sequence number once
	// stored. subject must match one of the stream's Subjects.
	Publish(ctx context.Context, subject string, data []byte) (seq uint64, err error)
	// Consume delivers stored and future messages to h through the durable
	// consumer named durable, starting after its last acknowledged message.
	// A message not acked within ackWait (<= 0: 30s) is delivered again.
	// ctx bounds only the set-up; delivery lasts until Unsubscribe or Close.
	Consume(ctx context.Context, durable string, ackWait time.Duration, h StreamHandler) (Subscription, error)
	// Name of the stream.
	Name() string
}

// StreamMsg is one stored message delivered to a durable consumer.
type StreamMsg struct {
	Subject  string
	Data     []byte
	Sequence uint64
	// Delivered counts deliveries of this message (1 on first delivery).
	Delivered uint64
	ack       func() error
	nak       func(delay time.Duration) error
}

// NewStreamMsg builds a StreamMsg for Bus implementations; nak asks for
// redelivery after delay (0: now).
func NewStreamMsg(subject string, data []byte, seq, delivered uint64, ack func() error, nak func(delay time.Duration) error) *StreamMsg {
	return &StreamMsg{Subject: subject, Data: data, Sequence: seq, Delivered: delivered, ack: ack, nak: nak}
}

// Ack marks the message consumed; it will not be delivered again.
func (m *StreamMsg) Ack() error { return m.ack() }

// Nak asks for redelivery now.
func (m *StreamMsg) Nak() error { return m.nak(0) }

// NakDelay asks for redelivery after d (JetStream's NakWithDelay), not
// after the consumer's AckWait: for a consumer that cannot take the
// message now but will soon (a full mailbox), so that it neither comes
// back at once, over and over, nor only after AckWait.
func (m *StreamMsg) NakDelay(d time.Duration) error { return m.nak(max(d, 0)) }

// StreamHandler receives stored messages.
type StreamHandler func(m *StreamMsg)

// Sentinel errors. Implementations wrap them with context.
var (
	// ErrPayloadTooLarge is returned when a payload exceeds MaxPayload.
	ErrPayloadTooLarge = errors.New("transport: payload too large")
	// ErrClosed is returned by operations on a closed bus.
	ErrClosed = errors.New("transport: bus closed")
	// ErrNoResponders is returned by Request when nobody listens on the subject.
	ErrNoResponders = errors.New("transport: no responders")
	// ErrTimeout is returned by Request when no reply arrives in time.
	ErrTimeout = errors.New("transport: request timed out")
	// ErrBadSubject is returned for a malformed subject.
	ErrBadSubject = errors.New("transport: bad subject")
	// ErrUnavailable is returned when the server answered that it cannot
	// serve the request for now (NATS JetStream's 503: a stream without a
	// leader while its replicas elect one, 4–9 s after a server died).
	ErrUnavailable = errors.New("transport: temporarily unavailable")
)

// Transient says whether err may pass if the same call is made again a
// moment later: a timeout, no responders (a subscriber or stream leader
// not there yet) or a server's "temporarily unavailable". Everything else
// (a closed bus, a missing message, a bad subject, a payload too large)
// fails the same way again.
func Transient(err error) bool {
	return errors.Is(err, ErrTimeout) || errors.Is(err, ErrNoResponders) || errors.Is(err, ErrUnavailable)
}
