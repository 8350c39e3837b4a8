package cluster

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/cluster/lease"
	"github.com/asyncrl/asyncrl/cluster/lease/contender"
)

// ErrNameInUse is returned by ClaimName when a live node holds the name.
var ErrNameInUse = errors.New("cluster: node name in use")

// NamesBucket is the KV bucket that holds node-name claims.
const NamesBucket = "asyncrl_names"

// NameGuard is this process's claim on its node name: a lease on the name
// in the NamesBucket, renewed in the background until Close. Two live
// processes can never hold one name, and a node restarted after kill -9
// gets its name back once the dead process's claim expires.
type NameGuard struct {
	e      *lease.Elector
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// NameClaim configures ClaimName.
type NameClaim struct {
	// Name is the node name (any string; it is encoded for the KV key).
	Name string
	// Instance identifies this process (e.g. host:pid:start time), so the
	// error can say who holds the name.
	Instance string
	// TTL of the claim (default 3s): a restarted node waits up to about
	// TTL + TTL/4 for its dead predecessor's claim to expire, and a
	// duplicate fails after that long. Every node must use the same TTL
	// (it is the bucket's).
	TTL time.Duration
	// OnLost is called (from the renewal goroutine) if the claim is lost
	// later — the node was cut off from the bus for longer than TTL. May be
	// nil.
	OnLost func()
	// Logger receives the guard's logs (default zerolog.Nop()).
	Logger zerolog.Logger
}

// ClaimName claims c.Name on the bus. It waits for a crashed holder's
// claim to expire (TTL + renew interval) and fails with ErrNameInUse,
// naming the holder, when the name stays held by a live process.
func ClaimName(ctx context.Context, nc *nats.Conn, c NameClaim) (*NameGuard, error) {
	if c.Name == "" {
		return nil, fmt.Errorf("%w: empty node name", ErrBadMembershipConfig)
	}
	if c.TTL == 0 {
		c.TTL = 3 * time.Second
	}
	cfg := lease.DefaultConfig("n_"+base64.RawURLEncoding.EncodeToString([]byte(c.Name)), c.Instance)
	cfg.Bucket, cfg.Timing, cfg.Logger = NamesBucket, contender.DefaultTiming(c.TTL), c.Logger
	if cfg.Holder == "" {
		cfg.Holder = c.Name
	}
	var held bool // the claim was won: a later loss is reported
	cfg.OnChange = func(st contender.Status) {
		if !st.Leader && held && c.OnLost != nil {
			c.OnLost()
		}
		held = held || st.Leader
	}
	e, err := lease.New(ctx, nc, cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster: claim node name %q: %w", c.Name, err)
	}
	deadline := time.Now().Add(c.TTL + cfg.Timing.RenewInterval + 500*time.Millisecond)
	for {
		st, next := e.Tick(ctx)
		if st.Leader {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			h, ok, herr := e.Holder(ctx)
			who := "another process"
			if herr == nil && ok {
				who = fmt.Sprintf("instance %q", h.Holder)
			}
			if cerr := ctx.Err(); cerr != nil {
				return nil, fmt.Errorf("cluster: claim node name %q: %w", c.Name, cerr)
			}
			return nil, fmt.Errorf("%w: %q is held by %s, which is alive (it kept renewing for %s); every node needs its own --name",
				ErrNameInUse, c.Name, who, c.TTL)
		}
		select {
		case <-ctx.Done():
		case <-time.After(max(time.Until(next), time.Millisecond)):
		}
	}
	rctx, cancel := context.WithCancel(context.Background())
	g := &NameGuard{e: e, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(g.done); _ = e.Run(rctx) }()
	return g, nil
}

// Held reports whether the claim is still held.
func (g *NameGuard) Held() bool { return g.e.Status().Leader }

// Close gives the name up (so a restart gets it at once) and stops renewing.
func (g *NameGuard) Close() {
	g.once.Do(func() {
		g.cancel()
		<-g.done
	})
}
