package natsbus

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyncrl/asyncrl/transport"
)

// defaultAckWait applies when Consume is given ackWait <= 0; it matches
// JetStream's own default.
const defaultAckWait = 30 * time.Second

// Stream implements transport.Bus: it creates the JetStream stream or
// updates its configuration to cfg.
func (b *Bus) Stream(ctx context.Context, cfg transport.StreamConfig) (transport.Stream, error) {
	if err := b.checkOpen(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("natsbus: %w", err)
	}
	jc := jetstream.StreamConfig{
		Name:     cfg.Name,
		Subjects: cfg.Subjects,
		MaxAge:   cfg.MaxAge,
		MaxBytes: -1,
		Storage:  jetstream.FileStorage,
		Replicas: max(1, cfg.Replicas),
	}
	if cfg.MaxBytes > 0 {
		jc.MaxBytes = cfg.MaxBytes
	}
	if cfg.Memory {
		jc.Storage = jetstream.MemoryStorage
	}
	if cfg.Duplicates > 0 {
		jc.Duplicates = cfg.Duplicates
	}
	if cfg.WorkQueue {
		jc.Retention = jetstream.WorkQueuePolicy
	}
	if cfg.SmallBlocks {
		// JetStream has no block-size field; it sizes a file stream's
		// blocks from its limits (autoTuneFileStorageBlockSize in
		// nats-server v2.15.2 server/stream.go): a per-subject limit
		// gives the key-value block size (defaultKVBlockSize, 4 MB),
		// no limit the large default (8 MB). A per-subject limit no log
		// reaches keeps every message and gets the smaller blocks.
		jc.MaxMsgsPerSubject = math.MaxInt64
	}
	s, err := b.createStepping(ctx, &jc, cfg.MinReplicas)
	var apiErr *jetstream.APIError
	if cfg.WorkQueue && errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrInvalidConfig && strings.Contains(apiErr.Description, "retention") {
		// The stream exists with limits retention (created by an older
		// asyncrl, servers still up): keep it as it is.
		jc.Retention = jetstream.LimitsPolicy
		s, err = b.js.CreateOrUpdateStream(ctx, jc)
	}
	if err != nil {
		return nil, fmt.Errorf("natsbus: stream %s: %w", cfg.Name, mapErr(err))
	}
	return &stream{b: b, s: s, name: cfg.Name}, nil
}

// BindStream opens the existing stream name without creating it or
// changing its configuration (one $JS.API.STREAM.INFO call). It is for a
// node whose bus user may not create or update streams (cluster/access):
// a rollout node binds its term's trajectory buffer, which the pipeline
// holder made with the buffer's settings. A stream not made yet is
// jetstream.ErrStreamNotFound: try again once its owner made it.
func (b *Bus) BindStream(ctx context.Context, name string) (transport.Stream, error) {
	if err := b.checkOpen(); err != nil {
		return nil, err
	}
	s, err := b.js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("natsbus: bind stream %s (its owner, the pipeline holder, makes it): %w", name, mapErr(err))
	}
	return &stream{b: b, s: s, name: name}, nil
}

// createStepping creates or updates the stream; when JetStream has too few
// servers up to place jc.Replicas copies it tries one fewer, down to
// minReplicas (0: no stepping), and logs what it settled for.
func (b *Bus) createStepping(ctx context.Context, jc *jetstream.StreamConfig, minReplicas int) (jetstream.Stream, error) {
	want := jc.Replicas
	for {
		s, err := b.js.CreateOrUpdateStream(ctx, *jc)
		if err == nil || !IsNoPlacement(err) || minReplicas < 1 || jc.Replicas <= minReplicas {
			if err == nil && jc.Replicas < want {
				b.log.Warn().Str("stream", jc.Name).Int("replicas", jc.Replicas).Int("wanted", want).
					Msg("natsbus: too few servers up to place every copy; stream created with fewer")
			}
			return s, err
		}
		jc.Replicas--
	}
}

// jsErrNoPeers is JetStream's code for "no suitable peers for placement"
// (JSClusterNoPeersErrF, server/jetstream_errors_generated.go of
// nats-server v2.15.2, the release go.mod pins):
// fewer servers up than the replicas asked, which TestStreamStepsDownReplicas
// gets from a real two-server cluster asked for three copies.
const jsErrNoPeers jetstream.ErrorCode = 10005

// IsNoPlacement reports whether err is JetStream refusing to place a
// stream's (or bucket's) copies for want of servers.
func IsNoPlacement(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrNoPeers
}

// jsErrInvalidConfig is JetStream's code for an invalid stream
// configuration (JSStreamInvalidConfigF); with "retention" in its
// description it is "stream configuration update can not change retention
// policy to/from workqueue".
const jsErrInvalidConfig jetstream.ErrorCode = 10052

type stream struct {
	b    *Bus
	s    jetstream.Stream
	name string
}

func (s *stream) Name() string { return s.name }

// Publish waits for JetStream's ack, so a returned sequence is stored.
func (s *stream) Publish(ctx context.Context, subject string, data []byte) (uint64, error) {
	return s.publish(ctx, subject, data)
}

// PublishMsgID is Publish with a message id: JetStream stores a message
// whose id it stored within its duplicate window (2 minutes) only once,
// so a retry after a lost ack does not store the message twice.
func (s *stream) PublishMsgID(ctx context.Context, subject, id string, data []byte) (uint64, error) {
	return s.publish(ctx, subject, data, jetstream.WithMsgID(id))
}

func (s *stream) publish(ctx context.Context, subject string, data []byte, opts ...jetstream.PublishOpt) (uint64, error) {
	if err := s.b.checkOpen(); err != nil {
		return 0, err
	}
	if err := transport.ValidateSubject(subject); err != nil {
		return 0, err
	}
	if err := s.b.checkPayload(subject, len(data)); err != nil {
		return 0, err
	}
	ack, err := s.b.js.Publish(ctx, subject, data, append(opts, jetstream.WithExpectStream(s.name))...)
	if err != nil {
		return 0, fmt.Errorf("natsbus: stream %s publish %s: %w", s.name, subject, mapErr(err))
	}
	return ack.Sequence, nil
}

// consumePullExpiry bounds how long one pull request waits on the server.
// nats.go's default (30 s, heartbeat 15 s) means a pull request lost
// while a clustered consumer is still being placed — the consumer exists,
// its first pull reached a server that did not know it yet — is noticed
// only after two missed heartbeats: 30 s with nothing delivered (seen as
// a CI failure of TestClusterRoutes). 5 s (heartbeat 2.5 s) re-pulls
// within about 5 s at the cost of one pull request per consumer per 5 s
// when idle.
const consumePullExpiry = 5 * time.Second

// Consume creates (or updates) the durable pull consumer and delivers to h on
// one goroutine, in stream order apart from redeliveries. ctx bounds only
// the set-up; the subscription lives until Unsubscribe or Close.
func (s *stream) Consume(ctx context.Context, durable string, ackWait time.Duration, h transport.StreamHandler) (transport.Subscription, error) {
	if err := s.b.checkOpen(); err != nil {
		return nil, err
	}
	if err := transport.ValidToken(durable); err != nil {
		return nil, fmt.Errorf("natsbus: durable name: %w", err)
	}
	if ackWait <= 0 {
		ackWait = defaultAckWait
	}
	c, err := s.s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       durable,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("natsbus: stream %s consumer %s: %w", s.name, durable, mapErr(err))
	}
	log := s.b.log
	cc, err := c.Consume(func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err != nil {
			log.Warn().Err(err).Str("stream", s.name).Msg("natsbus: message without metadata")
			return
		}
		nak := func(d time.Duration) error {
			if d <= 0 {
				return m.Nak()
			}
			return m.NakWithDelay(d)
		}
		h(transport.NewStreamMsg(m.Subject(), m.Data(), md.Sequence.Stream, md.NumDelivered, m.Ack, nak))
	}, jetstream.PullExpiry(consumePullExpiry), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if errors.Is(err, jetstream.ErrConnectionClosed) {
			return
		}
		log.Debug().Err(err).Str("stream", s.name).Str("durable", durable).Msg("natsbus: consume")
	}))
	if err != nil {
		return nil, fmt.Errorf("natsbus: stream %s consume %s: %w", s.name, durable, mapErr(err))
	}
	cs := &consumeSub{b: s.b, cc: cc}
	s.b.mu.Lock()
	if s.b.closed {
		s.b.mu.Unlock()
		cs.stop()
		return nil, transport.ErrClosed
	}
	s.b.consumers[cs] = struct{}{}
	s.b.mu.Unlock()
	return cs, nil
}

type consumeSub struct {
	b  *Bus
	cc jetstream.ConsumeContext
}

// Unsubscribe stops pulling and waits until the handler has returned, so no
// delivery happens after it.
func (c *consumeSub) Unsubscribe() error {
	c.b.mu.Lock()
	delete(c.b.consumers, c)
	c.b.mu.Unlock()
	c.stop()
	return nil
}

func (c *consumeSub) stop() {
	c.cc.Stop()
	select {
	case <-c.cc.Closed():
	case <-time.After(c.b.opts.DrainTimeout):
		c.b.log.Warn().Msg("natsbus: consumer did not stop in time")
	}
}

var _ transport.StoredReader = (*stream)(nil)

// GetMsg reads the message stored at seq (STREAM.MSG.GET through the
// stream's leader: nats.go v1.55.0 jetstream/stream.go getMsg (l. 565–594)
// uses a direct get, which any replica may answer, only when the stream
// sets AllowDirect, and no stream of ours does — a lagging replica would
// report a stored group missing (trainer.ErrBatchMissing); a deleted or
// never-stored sequence is transport.ErrNoMessage).
func (s *stream) GetMsg(ctx context.Context, seq uint64) (transport.StoredMsg, error) {
	if err := s.b.checkOpen(); err != nil {
		return transport.StoredMsg{}, err
	}
	m, err := s.s.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return transport.StoredMsg{}, fmt.Errorf("natsbus: stream %s seq %d: %w", s.name, seq, transport.ErrNoMessage)
	}
	if err != nil {
		return transport.StoredMsg{}, fmt.Errorf("natsbus: stream %s get seq %d: %w", s.name, seq, mapErr(err))
	}
	return transport.StoredMsg{Subject: m.Subject, Sequence: m.Sequence, Data: m.Data}, nil
}

// DeleteMsg deletes the message at seq (STREAM.MSG.DELETE, without
// overwriting its bytes: the buffer is in memory and holds token data, not
// secrets). A sequence already gone is not an error.
func (s *stream) DeleteMsg(ctx context.Context, seq uint64) error {
	if err := s.b.checkOpen(); err != nil {
		return err
	}
	err := s.s.DeleteMsg(ctx, seq)
	if err == nil || errors.Is(err, jetstream.ErrMsgNotFound) || errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) {
		return nil
	}
	return fmt.Errorf("natsbus: stream %s delete seq %d: %w", s.name, seq, mapErr(err))
}

// JetStreamReady asks JetStream for the account's info ($JS.API.INFO),
// which a clustered JetStream answers only through its meta leader: nil
// once one answers. A create sent while no meta leader is elected (a
// cluster starting, or the server that led it just died) is never
// answered and waits out its whole timeout; asking first, with a short
// one, finds the leader as soon as it is there.
func (b *Bus) JetStreamReady(ctx context.Context) error {
	if err := b.checkOpen(); err != nil {
		return err
	}
	if _, err := b.js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("natsbus: jetstream: %w", mapErr(err))
	}
	return nil
}
