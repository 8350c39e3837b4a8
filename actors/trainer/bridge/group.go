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

// rendezvousHost is where rank 0 hosts the group's TCP store: the ranks
// run on this machine.
const rendezvousHost = "127.0.0.1"

// freePort asks the kernel for a TCP port that is free now. The listener
// closes before rank 0 binds it; another process may take it in between,
// which fails the rendezvous and restarts the group on a new port.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", rendezvousHost+":0")
	if err != nil {
		return 0, fmt.Errorf("bridge: a rendezvous port on %s: %w", rendezvousHost, err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// rankEnv is torch's environment contract for rank r of a group at
// port (torchrun's names), for code in the child that reads it.
func rankEnv(g Group) []string {
	return []string{
		"MASTER_ADDR=" + g.Addr, "MASTER_PORT=" + strconv.Itoa(g.Port),
		"WORLD_SIZE=" + strconv.Itoa(g.WorldSize), "RANK=" + strconv.Itoa(g.Rank),
		"LOCAL_RANK=" + strconv.Itoa(g.Rank), "LOCAL_WORLD_SIZE=" + strconv.Itoa(g.WorldSize),
	}
}

// world is the group's size (1 without a group).
func (s *Supervisor) world() int { return max(1, s.opts.Ranks) }

// children are the running ranks in rank order (nil: none).
func (s *Supervisor) children() []*Child {
	if s.child == nil {
		return nil
	}
	return append([]*Child{s.child}, s.peers...)
}

// startRanks starts the world's processes: one child without a group,
// else one per rank with its Init.group and torch's rank environment.
func (s *Supervisor) startRanks(init Init) ([]*Child, []frame, error) {
	n := s.world()
	if n == 1 {
		c, err := StartChild(s.opts.Spec, s.opts.Logger)
		if err != nil {
			return nil, nil, err
		}
		return []*Child{c}, []frame{&init}, nil
	}
	port, err := freePort()
	if err != nil {
		return nil, nil, err
	}
	cs := make([]*Child, 0, n)
	reqs := make([]frame, 0, n)
	for r := range n {
		g := Group{Rank: r, WorldSize: n, Addr: rendezvousHost, Port: port, TimeoutS: s.opts.Rendezvous.Seconds()}
		spec := s.opts.Spec
		spec.Env = append(slices.Clone(spec.Env), rankEnv(g)...)
		c, err := StartChild(spec, s.opts.Logger.With().Int("rank", r).Logger())
		if err != nil {
			killAll(cs)
			return nil, nil, fmt.Errorf("rank %d of %d: %w", r, n, err)
		}
		in := init
		in.Group = &g
		cs, reqs = append(cs, c), append(reqs, &in)
	}
	return cs, reqs, nil
}

func killAll(cs []*Child) {
	for _, c := range cs {
		c.Kill()
	}
}

// callAll sends reqs[r] to rank r, all at once, and waits for every
// answer. The first rank that fails cancels the wait for the others (they
// may be blocked in a collective that the failed rank never reaches);
// their results are then context.Canceled.
func callAll(ctx context.Context, cs []*Child, typ string, reqs []frame, want string, timeout time.Duration) []rankResult {
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
