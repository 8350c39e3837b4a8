package natsbus

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
)

// ServerName is the name of the server this bus's connection is attached
// to: its own embedded server, or the one of an external cluster it
// reached (it changes when the connection fails over).
func (b *Bus) ServerName() string { return b.nc.ConnectedServerName() }

// StreamHealth is what a probe of a stream found.
type StreamHealth struct {
	// Leader is the server leading the stream ("" while it elects one; the
	// server's own name on a single server).
	Leader string
	// Replicas counts the stream's copies; Current how many are current
	// (the leader included).
	Replicas, Current int
	// Moved lists what PreferLeader asked to move to this bus's server:
	// the stream ("") and consumer names.
	Moved []string
}

// ProbeStream reads stream's health and that of the named durable
// consumers of it. An error means the stream or a consumer could not be
// read (missing, or no leader to answer). Only the named consumers are
// read: listing a stream's consumers asks every server that hosts one,
// and ephemeral ones (KV and object-store watchers) may sit on a dead one.
func (b *Bus) ProbeStream(ctx context.Context, stream string, consumers ...string) (StreamHealth, error) {
	return b.probe(ctx, stream, consumers, false)
}

// PreferLeader is ProbeStream that, on a clustered JetStream whose copies
// of stream are all current, also asks the leaders of the stream and of
// the named consumers to hand over to the server this bus's connection
// is attached to: a node that keeps the leaders of what it writes on its
// own server loses nothing but followers when another server dies, so
// those writes never wait for a leader election (4–9 s in nats-server)
// that would outlast a lease. A degraded group (a copy offline or behind)
// is left alone: moving a leader then risks an election without a quorum
// to spare.
func (b *Bus) PreferLeader(ctx context.Context, stream string, consumers ...string) (StreamHealth, error) {
	return b.probe(ctx, stream, consumers, true)
}

func (b *Bus) probe(ctx context.Context, stream string, consumers []string, move bool) (StreamHealth, error) {
	var h StreamHealth
	s, err := b.js.Stream(ctx, stream)
	if err != nil {
		return h, fmt.Errorf("natsbus: stream %s: %w", stream, mapErr(err))
	}
	info := s.CachedInfo()
	h = streamHealth(info)
	cl := info.Cluster
	me := b.ServerName()
	move = move && me != "" && cl != nil && len(cl.Replicas) > 0 && h.Current == h.Replicas
	if move && h.Leader != me && hasCurrent(cl, me) {
		if err := b.stepDown(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, me); err != nil {
			return h, fmt.Errorf("natsbus: stream %s leader to %s: %w", stream, me, err)
		}
		h.Moved = append(h.Moved, "")
	}
	for _, name := range consumers {
		moved, err := b.probeConsumer(ctx, s, stream, name, me, move)
		if err != nil {
			return h, err
		}
		if moved {
			h.Moved = append(h.Moved, name)
		}
	}
	return h, nil
}

// streamHealth is the leader and the count of copies, current ones among
// them, of the stream info describes.
func streamHealth(info *jetstream.StreamInfo) StreamHealth {
	h := StreamHealth{Replicas: max(1, info.Config.Replicas), Current: 1}
	if cl := info.Cluster; cl != nil {
		h.Leader = cl.Leader
		for _, r := range cl.Replicas {
			if r.Current {
				h.Current++
			}
		}
	}
	return h
}

// probeConsumer reads the durable consumer name of stream s and, when move
// and its group is whole, asks its leader to hand over to server me;
// moved says it asked.
func (b *Bus) probeConsumer(ctx context.Context, s jetstream.Stream, stream, name, me string, move bool) (moved bool, err error) {
	c, err := s.Consumer(ctx, name)
	if err != nil {
		return false, fmt.Errorf("natsbus: stream %s consumer %s: %w", stream, name, mapErr(err))
	}
	ccl := c.CachedInfo().Cluster
	if !move || ccl == nil || len(ccl.Replicas) == 0 || ccl.Leader == me || !hasCurrent(ccl, me) || !allCurrent(ccl) {
		return false, nil
	}
	if err := b.stepDown(ctx, "$JS.API.CONSUMER.LEADER.STEPDOWN."+stream+"."+name, me); err != nil {
		return false, fmt.Errorf("natsbus: stream %s consumer %s leader to %s: %w", stream, name, me, err)
	}
	return true, nil
}

// allCurrent: every copy of cl is current.
func allCurrent(cl *jetstream.ClusterInfo) bool {
	return cl.Leader != "" && !slices.ContainsFunc(cl.Replicas, func(p *jetstream.PeerInfo) bool { return !p.Current || p.Offline })
}

// hasCurrent: server is cl's leader or one of its current replicas.
func hasCurrent(cl *jetstream.ClusterInfo, server string) bool {
	return cl.Leader == server || slices.ContainsFunc(cl.Replicas, func(p *jetstream.PeerInfo) bool { return p.Name == server && p.Current })
}

// stepDown asks a raft group's leader (subject: the JetStream API's
// stepdown request) to hand over to the server named preferred.
func (b *Bus) stepDown(ctx context.Context, subject, preferred string) error {
	req, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": preferred}})
	msg, err := b.nc.RequestWithContext(ctx, subject, req)
	if err != nil {
		return mapErr(err)
	}
	var resp struct {
		Success bool `json:"success"`
		Error   *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("stepdown answer: %w", err)
	}
	if resp.Error != nil {
		return fmt.Errorf("stepdown refused: %s (%d)", resp.Error.Description, resp.Error.Code)
	}
	return nil
}
