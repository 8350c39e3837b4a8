package bridge

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The worker group (Options.Ranks > 1, trainer.exec_ranks): the
// Supervisor starts one child per rank and talks to every rank over its
// own stdin/stdout (docs/protocol.md "Worker groups"). Every request goes
// to all ranks at once and a call succeeds only when every rank answers;
// the first failure cancels the wait for the others, and a group that
// failed is killed and started again as a whole (a torch.distributed
// group cannot take a new member).

// rankResult is one rank's answer to a group call.
type rankResult struct {
	rep Reply
	err error
}

// rendezvousHost is where rank 0 hosts the group's TCP store when every
// rank runs on this machine (Options.RendezvousAddr unset).
const rendezvousHost = "127.0.0.1"

// freePort asks the kernel for a TCP port on host that is free now. The
// listener closes before rank 0 binds it; another process may take it in
// between, which fails the rendezvous and restarts the group on a new
// port.
func freePort(host string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("bridge: a rendezvous port on %s: %w", host, err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// world is the group's size (1 without a group): Ranks on this node and
// on each of the other Nodes-1.
func (s *Supervisor) world() int { return max(1, s.opts.Ranks) * max(1, s.opts.Nodes) }

// local is how many of the world's ranks run here (ranks 0…local-1).
func (s *Supervisor) local() int { return max(1, s.opts.Ranks) }

// children are the running ranks in rank order (nil: none).
func (s *Supervisor) children() []member {
	if s.child == nil {
		return nil
	}
	return append([]member{s.child}, s.peers...)
}

// startRanks starts the world's processes: one child without a group,
// else this node's ranks (each with its Init.group and torch's rank
// environment), then the other nodes' through Options.Remote.
func (s *Supervisor) startRanks(ctx context.Context, init Init) ([]member, []frame, error) {
	n := s.world()
	if n == 1 {
		c, err := StartChild(s.opts.Spec, s.opts.Logger)
		if err != nil {
			return nil, nil, err
		}
		return []member{c}, []frame{&init}, nil
	}
	if n > s.local() && s.opts.Remote == nil {
		return nil, nil, fmt.Errorf("a group of %d ranks over %d nodes needs other nodes to start ranks on (trainer.exec_nodes runs on asyncrl node's cluster terms)", n, s.opts.Nodes)
	}
	host := s.opts.RendezvousAddr
	if host == "" {
		host = rendezvousHost
	}
	port, err := freePort(host)
	if err != nil {
		return nil, nil, err
	}
	groups := make([]Group, n)
	for r := range n {
		groups[r] = Group{Rank: r, WorldSize: n, Addr: host, Port: port, TimeoutS: s.opts.Rendezvous.Seconds()}
	}
	ms := make([]member, 0, n)
	reqs := make([]frame, 0, n)
	for r := range s.local() {
		spec := s.opts.Spec
		spec.Env = append(slices.Clone(spec.Env), RankEnv(groups[r], r, s.local())...)
		c, err := StartChild(spec, s.opts.Logger.With().Int("rank", r).Logger())
		if err != nil {
			killAll(ms)
			return nil, nil, fmt.Errorf("rank %d of %d: %w", r, n, err)
		}
		ms = append(ms, c)
	}
	if n > s.local() {
		links, err := s.opts.Remote.StartRanks(ctx, groups[s.local():])
		if err == nil && len(links) != n-s.local() {
			err = fmt.Errorf("%d links for %d ranks", len(links), n-s.local())
			for _, l := range links {
				l.Kill()
			}
		}
		if err != nil {
			killAll(ms)
			return nil, nil, fmt.Errorf("ranks %d…%d of %d on other nodes: %w", s.local(), n-1, n, err)
		}
		for _, l := range links {
			ms = append(ms, &remoteRank{link: l})
		}
	}
	for r := range n {
		in := init
		in.Group = &groups[r]
		reqs = append(reqs, &in)
	}
	return ms, reqs, nil
}

// killAll ends every rank at once: a remote one's Kill waits for its
// host's answer, and a dead group must be gone before the next starts.
func killAll(ms []member) {
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(m.Kill)
	}
	wg.Wait()
}

// callAll sends reqs[r] to rank r, all at once, and waits for every
// answer. The first rank that fails cancels the wait for the others (they
// may be blocked in a collective that the failed rank never reaches);
// their results are then context.Canceled.
func callAll(ctx context.Context, cs []member, typ string, reqs []frame, want string, timeout time.Duration) []rankResult {
	out := make([]rankResult, len(cs))
	if len(cs) == 1 {
		out[0].rep, out[0].err = cs[0].Call(ctx, typ, reqs[0], want, timeout)
		return out
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep, err := c.Call(cctx, typ, reqs[r], want, timeout)
			out[r] = rankResult{rep: rep, err: err}
			if err != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	return out
}

// groupError is the reason a group call failed (nil when every rank
// answered): a rank's *ChildError first (the child's own words, e.g. a
// rendezvous that timed out), else the first failure that is not the
// cancellation callAll caused. refused reports that every rank answered
// with a *ChildError: nothing was applied anywhere and the group is
// intact.
func groupError(ctx context.Context, res []rankResult) (refused bool, err error) {
	refused = true
	var child, other error
	for r, x := range res {
		var ce *ChildError
		switch {
		case x.err == nil:
			refused = false
		case errors.As(x.err, &ce):
			if child == nil {
				child = rankErr(r, len(res), x.err)
			}
		default:
			refused = false
			if other == nil && (ctx.Err() != nil || !errors.Is(x.err, context.Canceled)) {
				other = rankErr(r, len(res), x.err)
			}
		}
	}
	switch {
	case child != nil:
		return refused, child
	case other != nil:
		return false, other
	}
	for _, x := range res {
		if x.err != nil {
			return false, x.err
		}
	}
	return false, nil
}

// unanswered names the ranks of a failed group Init that had not
// answered when another rank's failure ended the wait (their results are
// callAll's cancellation): where a rendezvous timed out, the ranks that
// never reached it — their log says why ("" when every rank answered).
func unanswered(ctx context.Context, res []rankResult) string {
	if len(res) < 2 || ctx.Err() != nil {
		return ""
	}
	var rs []string
	for r, x := range res {
		if errors.Is(x.err, context.Canceled) {
			rs = append(rs, strconv.Itoa(r))
		}
	}
	if len(rs) == 0 {
		return ""
	}
	return fmt.Sprintf("; rank %s of %d had not answered its Init (it never reached the rendezvous: see its log lines, rank=%s)",
		strings.Join(rs, ", "), len(res), strings.Join(rs, ","))
}

// rankErr names the rank in a group's error (a world of one keeps the
// child's error as it was).
func rankErr(r, n int, err error) error {
	if n == 1 {
		return err
	}
	return fmt.Errorf("rank %d of %d: %w", r, n, err)
}

// rankFigures are the ranks' StepResult.rank figures, in rank order.
func rankFigures(res []rankResult) []map[string]float64 {
	var out []map[string]float64
	for _, x := range res {
		if len(x.rep.Rank) > 0 {
			out = append(out, numbers(x.rep.Rank))
		}
	}
	return out
}
