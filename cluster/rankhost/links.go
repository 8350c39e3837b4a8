package rankhost

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asyncrl/asyncrl/actors/trainer/bridge"
	"github.com/asyncrl/asyncrl/transport"
)

// LinksConfig configures a holder's Links.
type LinksConfig struct {
	// Owner is the holder's node name, Token its term's fencing token,
	// Term its run id (names the groups).
	Owner string
	Token uint64
	Term  string
	// Plan is the base run's plan (RankHost subjects).
	Plan transport.RunPlan
	// PerNode is how many ranks each other node starts (trainer.exec_ranks).
	PerNode int
	// Pick lists the nodes that may host ranks, in preference order (the
	// holder excluded); Alive reports whether one still is a live member.
	Pick  func() []string
	Alive func(node string) bool
	// Wait bounds how long a start waits for Pick to list enough nodes
	// (a member that just joined, or a restarting one); default 1 min.
	Wait time.Duration
}

// Links is a bridge.RemoteRanks over rank hosts on other nodes.
type Links struct {
	cfg LinksConfig
	bus transport.Bus
	seq atomic.Int64
}

var _ bridge.RemoteRanks = (*Links)(nil)

// NewLinks is the holder's side for one term.
func NewLinks(bus transport.Bus, cfg LinksConfig) *Links {
	if cfg.Wait <= 0 {
		cfg.Wait = time.Minute
	}
	cfg.PerNode = max(cfg.PerNode, 1)
	return &Links{cfg: cfg, bus: bus}
}

// nodes waits until Pick lists n nodes and returns the first n.
func (l *Links) nodes(ctx context.Context, n int) ([]string, error) {
	deadline := time.Now().Add(l.cfg.Wait)
	for {
		got := l.cfg.Pick()
		if len(got) >= n {
			return got[:n], nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("trainer.exec_nodes needs %d trainer node(s) besides %s to start ranks on; after %v the live ones are [%s] (start more asyncrl node processes with the trainer role, or lower trainer.exec_nodes)",
				n, l.cfg.Owner, l.cfg.Wait, strings.Join(got, ", "))
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// StartRanks implements bridge.RemoteRanks: PerNode ranks on each of the
// first len(gs)/PerNode nodes Pick lists.
func (l *Links) StartRanks(ctx context.Context, gs []bridge.Group) ([]bridge.RankLink, error) {
	per := l.cfg.PerNode
	if len(gs)%per != 0 {
		return nil, fmt.Errorf("rankhost: %d ranks are not a whole number of nodes of %d", len(gs), per)
	}
	nodes, err := l.nodes(ctx, len(gs)/per)
	if err != nil {
		return nil, err
	}
	group := fmt.Sprintf("%s-g%d", l.cfg.Term, l.seq.Add(1))
	var links []bridge.RankLink
	fail := func(err error) ([]bridge.RankLink, error) {
		killLinks(links)
		return nil, err
	}
	for i, node := range nodes {
		share := gs[i*per : (i+1)*per]
		subj, err := l.cfg.Plan.RankHost(node)
		if err != nil {
			return fail(err)
		}
		req := request{Op: opStart, Owner: l.cfg.Owner, Token: l.cfg.Token, Group: group, Ranks: share}
		rep, err := l.call(ctx, subj, req, 30*time.Second)
		if err != nil {
			// A start that timed out may have started ranks there: end them.
			for _, g := range share {
				(&link{l: l, subj: subj, node: node, group: group, rank: g.Rank}).Kill()
			}
			return fail(fmt.Errorf("start ranks %d…%d on %s: %w", share[0].Rank, share[len(share)-1].Rank, node, err))
		}
		for j, g := range share {
			pid := 0
			if j < len(rep.Pids) {
				pid = rep.Pids[j]
			}
			links = append(links, &link{l: l, subj: subj, node: node, group: group, rank: g.Rank, pid: pid})
		}
	}
	return links, nil
}

func killLinks(ls []bridge.RankLink) {
	var wg sync.WaitGroup
	for _, x := range ls {
		wg.Go(x.Kill)
	}
	wg.Wait()
}

// call sends req and decodes the reply; a reply's Err is an error (with
// its kind, bridge.RelayError). timeout 0: until ctx ends.
func (l *Links) call(ctx context.Context, subj string, req request, timeout time.Duration) (reply, error) {
	body, err := encode(req)
	if err != nil {
		return reply{}, err
	}
	if limit := l.bus.MaxPayload(); limit > 0 && len(body) > limit {
		return reply{}, fmt.Errorf("rankhost: a %s request of %d bytes to %s exceeds the bus's max payload of %d bytes: a multi-node group's frames (the mini-batch) travel over the bus; raise the NATS server's max_payload or lower trainer.mini_batch_size", req.Op, len(body), subj, limit)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	m, err := l.bus.Request(ctx, subj, body)
	if err != nil {
		return reply{}, fmt.Errorf("rankhost: %s on %s: %w", req.Op, subj, err)
	}
	var rep reply
	if err := decode(m.Data, &rep); err != nil {
		return reply{}, err
	}
	if rep.Err != "" {
		return rep, bridge.RelayError(rep.Kind, rep.Err)
	}
	return rep, nil
}

// link is one remote rank.
type link struct {
	l                 *Links
	subj, node, group string
	rank, pid         int
	killOnce          sync.Once
}

func (k *link) String() string { return fmt.Sprintf("%s rank %d pid %d", k.node, k.rank, k.pid) }

// Exchange implements bridge.RankLink. The far side enforces timeout;
// the request waits a little longer for its answer, and fails at once
// when the node leaves the membership.
func (k *link) Exchange(ctx context.Context, body []byte, timeout time.Duration) ([]byte, error) {
	req := request{Op: opFrame, Owner: k.l.cfg.Owner, Token: k.l.cfg.Token, Group: k.group, Rank: k.rank,
		Body: body, TimeoutNS: int64(timeout)}
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if k.l.cfg.Alive != nil {
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					if !k.l.cfg.Alive(k.node) {
						cancel(fmt.Errorf("%w (%s): its node left the cluster", bridge.ErrChildExited, k))
						return
					}
				}
			}
		}()
	}
	wait := time.Duration(0)
	if timeout > 0 {
		wait = timeout + 30*time.Second
	}
	rep, err := k.l.call(cctx, k.subj, req, wait)
	if err != nil {
		if cause := context.Cause(cctx); ctx.Err() == nil && cause != nil && !errors.Is(cause, context.Canceled) {
			return nil, cause
		}
		return nil, err
	}
	return rep.Body, nil
}

// Kill implements bridge.RankLink: the host ends the rank (at most 10 s
// waiting for its answer; a host that is gone took its ranks with it).
func (k *link) Kill() {
	k.killOnce.Do(func() {
		req := request{Op: opKill, Owner: k.l.cfg.Owner, Token: k.l.cfg.Token, Group: k.group, Rank: k.rank}
		_, _ = k.l.call(context.Background(), k.subj, req, 10*time.Second)
	})
}
