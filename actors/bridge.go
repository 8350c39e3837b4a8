package actors

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/asyncrl/asyncrl/transport"
)

// Decoder turns a bus payload into a typed message. It must not keep data:
// the bus may reuse the buffer once the handler returns.
type Decoder[In any] func(data []byte) (In, error)

// Encoder turns a typed message into a bus payload.
type Encoder[Out any] func(msg Out) ([]byte, error)

// Bridge is an active bus subscription feeding one shell. The shell stops
// its bridges when it stops; Stop may also be called directly.
type Bridge struct {
	subject string
	once    sync.Once
	sub     transport.Subscription
	err     error
	stopped chan struct{} // closed by Stop: ends a handler's wait for room
}

// Subject is the subject (or pattern) the bridge listens on.
func (b *Bridge) Subject() string { return b.subject }

// Stop unsubscribes. It is safe to call more than once and returns the first
// Unsubscribe error.
func (b *Bridge) Stop() error {
	b.once.Do(func() {
		if b.stopped != nil {
			close(b.stopped)
		}
		if b.sub != nil {
			b.err = b.sub.Unsubscribe()
		}
	})
	return b.err
}

// BridgeSubject subscribes sh to subject on bus: every payload is decoded
// and told to the shell. queue non-empty makes it a queue subscription (each
// message goes to one member of the queue). Undecodable payloads are counted
// in asyncrl_actor_decode_errors_total and logged (rate-limited).
//
// Overload slows admission, it loses nothing: when the mailbox is full the
// handler waits (no polling: the actor signals when its core takes a
// message) until there is room, the shell stops or the bridge stops; the
// subscription's later messages wait in the bus meanwhile (handlers of one
// subscription run one at a time). Each wait is counted in
// asyncrl_actor_mailbox_waits_total and _wait_seconds_total and logged
// (rate-limited). A bus that runs the handler inside the publisher's Publish
// (transport.Msg.Inline: memhub in auto mode) gets no wait, which could
// deadlock an actor publishing to itself: the message is admitted over the
// bound (asyncrl_actor_mailbox_overflow_total). What a plain subscription
// can still lose is what the bus loses: messages published while nobody is
// subscribed, a NATS client disconnected, or a NATS subscription past its
// pending limits (natsbus counts those as slow-consumer drops). Use
// BridgeStream when even that matters.
func BridgeSubject[In, Out any](bus transport.Bus, subject, queue string, decode Decoder[In], sh *Shell[In, Out]) (*Bridge, error) {
	if decode == nil {
		return nil, fmt.Errorf("%w: decode must not be nil", ErrInvalidConfig)
	}
	b := &Bridge{subject: subject, stopped: make(chan struct{})}
	h := func(m *transport.Msg) {
		msg, err := decode(m.Data)
		if err != nil {
			sh.decodeFailed(subject, m.Subject, err)
			return
		}
		// Only a stopping shell or bridge refuses; that is the end of the
		// subscription, not overload.
		_ = sh.tellWait(msg, subject, b.stopped, m.Inline)
	}
	var err error
	if queue == "" {
		b.sub, err = bus.Subscribe(subject, h)
	} else {
		b.sub, err = bus.QueueSubscribe(subject, queue, h)
	}
	if err != nil {
		return nil, fmt.Errorf("actors: bridge %q to %q: %w", subject, sh.Name(), err)
	}
	if err := sh.addBridge(b); err != nil {
		_ = b.Stop()
		return nil, err
	}
	return b, nil
}

// BridgeStream consumes stream through the durable consumer durable and
// tells each decoded message to sh. A message is acked only after the core
// stepped it without panicking, so nothing accepted is lost:
//   - mailbox full: refused with a delay (StreamMsg.NakDelay), 50 ms on
//     the first delivery, doubling per delivery up to ackWait
//     (refusedDelay), so an actor that is only briefly behind gets it back
//     soon instead of after ackWait (30 s for the sampling filter), and
//     one that stays full is not handed it over and over;
//   - shell stopped: not acked, redelivered after ackWait;
//   - core panicked on it: not acked, redelivered after ackWait (a message
//     that always panics ends in escalation once MaxFailures is reached);
//   - undecodable: acked (redelivery cannot help), counted and logged.
func BridgeStream[In, Out any](ctx context.Context, stream transport.Stream, durable string, ackWait time.Duration, decode Decoder[In], sh *Shell[In, Out]) (*Bridge, error) {
	if decode == nil {
		return nil, fmt.Errorf("%w: decode must not be nil", ErrInvalidConfig)
	}
	return BridgeStreamMsg(ctx, stream, durable, ackWait, func(m *transport.StreamMsg) (In, error) { return decode(m.Data) }, sh)
}

// BridgeStreamMsg is BridgeStream with a decoder that sees the whole
// stored message (its subject and stream sequence, not only its data):
// the sampling actor turns a stored group into a reference to where it is
// stored.
func BridgeStreamMsg[In, Out any](ctx context.Context, stream transport.Stream, durable string, ackWait time.Duration, decode func(*transport.StreamMsg) (In, error), sh *Shell[In, Out]) (*Bridge, error) {
	if decode == nil {
		return nil, fmt.Errorf("%w: decode must not be nil", ErrInvalidConfig)
	}
	name := stream.Name() + "/" + durable
	b := &Bridge{subject: name}
	h := func(m *transport.StreamMsg) {
		msg, err := decode(m)
		if err != nil {
			sh.decodeFailed(name, m.Subject, err)
			if aerr := m.Ack(); aerr != nil {
				sh.limited.Warn("ack:" + name).Err(aerr).Msg("ack of undecodable message failed")
			}
			return
		}
		err = sh.deliver(msg, func() {
			if aerr := m.Ack(); aerr != nil {
				sh.limited.Warn("ack:"+name).Err(aerr).Uint64("seq", m.Sequence).Msg("ack failed; message will be redelivered")
			}
		})
		switch {
		case errors.Is(err, ErrMailboxFull):
			if nerr := m.NakDelay(refusedDelay(m.Delivered, ackWait)); nerr != nil {
				sh.limited.Warn("nak:"+name).Err(nerr).Uint64("seq", m.Sequence).Msg("refusing a message failed; it comes back after AckWait")
			}
		case err != nil:
			sh.limited.Warn("bridge:" + name).Err(err).Msg("stream message not delivered; left for redelivery")
		}
	}
	sub, err := stream.Consume(ctx, durable, ackWait, h)
	if err != nil {
		return nil, fmt.Errorf("actors: bridge stream %q to %q: %w", name, sh.Name(), err)
	}
	b.sub = sub
	if err := sh.addBridge(b); err != nil {
		_ = b.Stop()
		return nil, err
	}
	return b, nil
}

// refusedDelay is how long a message refused by a full mailbox waits
// before it comes back: 50 ms on its first delivery, doubling with each
// delivery, never more than ackWait (<= 0: the stream's default, 30 s).
func refusedDelay(delivered uint64, ackWait time.Duration) time.Duration {
	if ackWait <= 0 {
		ackWait = 30 * time.Second
	}
	d := refusedDelayBase << min(max(delivered, 1)-1, 20)
	return min(d, ackWait)
}

const refusedDelayBase = 50 * time.Millisecond

func (sh *Shell[In, Out]) decodeFailed(pattern, subject string, err error) {
	sh.sys.metrics.decodeErr.WithLabelValues(sh.cfg.Name, pattern).Inc()
	sh.limited.Warn("decode:"+pattern).Err(err).Str("subject", subject).Msg("undecodable payload dropped")
}

// BusSender is the Sender that publishes a core's sends on a bus.
type BusSender[Out any] struct {
	Bus    transport.Bus
	Encode Encoder[Out]
}

var _ Sender[int] = BusSender[int]{}

// Send encodes msg and publishes it on subject.
func (s BusSender[Out]) Send(ctx context.Context, subject string, msg Out) error {
	data, err := s.Encode(msg)
	if err != nil {
		return fmt.Errorf("actors: encode for %q: %w", subject, err)
	}
	if err := s.Bus.Publish(ctx, subject, data); err != nil {
		return fmt.Errorf("actors: publish %q: %w", subject, err)
	}
	return nil
}

// StreamSender is the Sender that appends a core's sends to a durable
// stream; Send returns once the message is stored.
type StreamSender[Out any] struct {
	Stream transport.Stream
	Encode Encoder[Out]
}

var _ Sender[int] = StreamSender[int]{}

// Send encodes msg and stores it on subject.
func (s StreamSender[Out]) Send(ctx context.Context, subject string, msg Out) error {
	data, err := s.Encode(msg)
	if err != nil {
		return fmt.Errorf("actors: encode for %q: %w", subject, err)
	}
	if _, err := s.Stream.Publish(ctx, subject, data); err != nil {
		return fmt.Errorf("actors: store %q: %w", subject, err)
	}
	return nil
}
