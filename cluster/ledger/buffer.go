package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// GroupMsg is one buffered group delivered to a consumer.
type GroupMsg struct {
	// GroupID is the id it was appended with.
	GroupID string
	// Data is the payload (an encoded GroupReady / Arrow token batch).
	Data []byte
	// Sequence is its position in the buffer.
	Sequence uint64
	// Delivered counts deliveries (1 the first time; more after a consumer
	// died or returned an error before acking).
	Delivered uint64
}

const groupIDHeader = "Asyncrl-Group"

// AppendGroup stores a finished group. Re-appending the same group id
// within Config.DuplicateWindow stores nothing and reports dup (a producer
// retrying after a lost reply cannot make the trainer see a group twice).
func (l *Ledger) AppendGroup(ctx context.Context, groupID string, data []byte) (seq uint64, dup bool, err error) {
	if groupID == "" {
		return 0, false, fmt.Errorf("ledger: append group: empty group id")
	}
	msg := nats.NewMsg(l.cfg.GroupSubject)
	msg.Data = data
	msg.Header.Set(groupIDHeader, groupID)
	ack, err := l.js.PublishMsg(ctx, msg, jetstream.WithMsgID(groupID))
	if err != nil {
		return 0, false, fmt.Errorf("ledger: append group %s: %w", groupID, err)
	}
	return ack.Sequence, ack.Duplicate, nil
}

// GroupConsumer is a running consumer of the group buffer.
type GroupConsumer struct {
	cc   jetstream.ConsumeContext
	once sync.Once
}

// Stop stops delivery and waits until no handler runs.
func (c *GroupConsumer) Stop() {
	c.once.Do(func() {
		c.cc.Drain()
		<-c.cc.Closed()
	})
}

// ConsumeGroups delivers buffered groups, oldest unacked first, through the
// durable consumer named durable (letters, digits, '-', '_'), one at a
// time. A group is acked only when h returns nil; an error (or a crash
// before h returns) makes JetStream deliver it again after ackWait (<= 0:
// 30s), so a group is never lost between the buffer and the trainer.
func (l *Ledger) ConsumeGroups(ctx context.Context, durable string, ackWait time.Duration, h func(GroupMsg) error) (*GroupConsumer, error) {
	if ackWait <= 0 {
		ackWait = 30 * time.Second
	}
	cons, err := l.groups.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: durable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait,
		MaxAckPending: 1, DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: group consumer %s: %w", durable, err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err != nil {
			_ = m.Nak()
			return
		}
		g := GroupMsg{GroupID: m.Headers().Get(groupIDHeader), Data: m.Data(), Sequence: md.Sequence.Stream, Delivered: md.NumDelivered}
		if err := h(g); err != nil {
			l.log.Warn().Err(err).Str("group", g.GroupID).Uint64("delivered", g.Delivered).Msg("ledger: group handler failed; redelivering")
			_ = m.NakWithDelay(ackWait / 4)
			return
		}
		if err := m.DoubleAck(context.Background()); err != nil && !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			l.log.Warn().Err(err).Str("group", g.GroupID).Msg("ledger: ack failed; the group may be delivered again")
		}
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: consume groups: %w", err)
	}
	return &GroupConsumer{cc: cc}, nil
}

// PendingGroups is how many stored groups the durable consumer has not
// acked yet (delivered or not). The consumer must exist (ConsumeGroups
// created it); before that every stored group is pending (StoredGroups).
func (l *Ledger) PendingGroups(ctx context.Context, durable string) (uint64, error) {
	c, err := l.groups.Consumer(ctx, durable)
	if err != nil {
		return 0, fmt.Errorf("ledger: consumer %s: %w", durable, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("ledger: consumer %s info: %w", durable, err)
	}
	return info.NumPending + uint64(info.NumAckPending), nil
}

// StoredGroups is how many groups the buffer holds.
func (l *Ledger) StoredGroups(ctx context.Context) (uint64, error) {
	info, err := l.groups.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("ledger: group buffer info: %w", err)
	}
	return info.State.Msgs, nil
}
