package trainer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors/trainer/bridge"
	"github.com/asyncrl/asyncrl/model"
)

// relayRemote is "another node" inside the test: it starts each rank it
// is asked for as a child of this process and carries its frames with
// bridge.Child.Relay — the far side's code of cluster/rankhost, without
// the bus (cluster/rankhost's tests cover that part).
type relayRemote struct {
	spec bridge.Spec
	mu   sync.Mutex
	pids []int // every rank started, in order
	// killNext, when set, SIGKILLs the first remote rank that receives a
	// TrainBatch for step killStep, once.
	killStep int64
	killed   int
}

func (r *relayRemote) StartRanks(_ context.Context, gs []bridge.Group) ([]bridge.RankLink, error) {
	var out []bridge.RankLink
	for i, g := range gs {
		spec := r.spec
		spec.Env = append(slices.Clone(spec.Env), bridge.RankEnv(g, i, len(gs))...)
		c, err := bridge.StartChild(spec, zerolog.Nop())
		if err != nil {
			for _, l := range out {
				l.Kill()
			}
			return nil, err
		}
		r.mu.Lock()
		r.pids = append(r.pids, c.Pid())
		r.mu.Unlock()
		out = append(out, &relayLink{r: r, c: c, rank: g.Rank})
	}
	return out, nil
}

type relayLink struct {
	r    *relayRemote
	c    *bridge.Child
	rank int
}

func (l *relayLink) String() string {
	return fmt.Sprintf("test node rank %d pid %d", l.rank, l.c.Pid())
}
func (l *relayLink) Kill() { l.c.Kill() }

func (l *relayLink) Exchange(ctx context.Context, body []byte, timeout time.Duration) ([]byte, error) {
	if h, err := bridge.DecodeHeader(body); err == nil && h.Type == bridge.TypeTrainBatch {
		var tb bridge.TrainBatch
		if err := bridge.DecodeFrame(body, &tb); err == nil {
			l.r.mu.Lock()
			if l.r.killStep != 0 && tb.Step == l.r.killStep && l.r.killed == 0 {
				l.r.killed = l.c.Pid()
				_ = syscall.Kill(l.c.Pid(), syscall.SIGKILL)
			}
			l.r.mu.Unlock()
		}
	}
	out, err := l.c.Relay(ctx, body, timeout)
	if err != nil {
		// what a rank host sends back, read back as the holder does
		return nil, bridge.RelayError(bridge.RelayKind(err), err.Error())
	}
	return out, nil
}

// TestExecTorchRanksOnTwoNodesTrainLikeOne: a group of one rank here and
// one on "another node" (trainer.exec_nodes 2: Options.Nodes, its rank
// started through RemoteRanks and reached only through frames relayed as
// bytes) trains the same three global batches exactly as the two-rank
// group on one node does — the relay changes where a rank runs, not what
// it computes. Then the remote rank is SIGKILLed as step 2 reaches it:
// the whole group is replaced (both processes new), resumes from step
// 1's sharded state, and the three steps equal the uninterrupted run's
// bit for bit — none lost, none trained twice.
func TestExecTorchRanksOnTwoNodesTrainLikeOne(t *testing.T) {
	argv, env := torchChild(t)
	ctx := context.Background()
	train := func(nodes int, remote *relayRemote) ([]model.StepStats, *Exec) {
		ranks := 2 / nodes
		ex, err := startTorchExecHook(t, t.TempDir(), ranks, argv, env, time.Minute, nil, func(o *bridge.Options) {
			o.StepTimeout, o.InitTimeout = 30*time.Second, 2*time.Minute
			o.Nodes = nodes
			if remote != nil {
				o.Remote = remote
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ex.Close(ctx) })
		var out []model.StepStats
		for _, p := range preparedSteps(t, 2) {
			st, _, err := ex.Step(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, st)
		}
		return out, ex
	}
	local, _ := train(1, nil)
	remote := &relayRemote{spec: bridge.Spec{Argv: argv, Env: env}}
	spread, ex := train(2, remote)
	if ex.Ranks() != 2 || ex.Restarts() != 0 {
		t.Errorf("spread group: %d ranks, %d restarts; want 2 and 0", ex.Ranks(), ex.Restarts())
	}
	if rs := ex.RankStats(); len(rs) != 2 || rs[1].Steps != 3 || rs[1].AllReduceSeconds <= 0 {
		t.Errorf("the remote rank's figures did not come back: %+v", rs)
	}
	for k := range local {
		if local[k] != spread[k] {
			t.Errorf("step %d: one node %+v, two nodes %+v", k+1, local[k], spread[k])
		}
	}

	killer := &relayRemote{spec: bridge.Spec{Argv: argv, Env: env}, killStep: 2}
	again, ex2 := train(2, killer)
	if ex2.Restarts() != 1 {
		t.Errorf("%d restarts after the remote rank's death; want 1", ex2.Restarts())
	}
	killer.mu.Lock()
	pids, dead := slices.Clone(killer.pids), killer.killed
	killer.mu.Unlock()
	if dead == 0 || len(pids) != 2 || pids[0] != dead {
		t.Fatalf("remote ranks started %v, killed %d: want the first killed and a second started for the new group", pids, dead)
	}
	if err := syscall.Kill(dead, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the killed remote rank %d still exists (kill -0: %v)", dead, err)
	}
	for k := range local {
		if again[k] != local[k] {
			t.Errorf("step %d: after the remote rank's death %+v, uninterrupted %+v", k+1, again[k], local[k])
		}
	}
}

// TestExecNodesWithoutRemote: a group over two nodes with nowhere to
// start the other node's ranks (no RemoteRanks: asyncrl run) fails at
// start saying so, before any rank is started.
func TestExecNodesWithoutRemote(t *testing.T) {
	_, err := startTorchExecHook(t, t.TempDir(), 1, []string{"/nonexistent/never-started"}, nil, time.Second, nil,
		func(o *bridge.Options) { o.Nodes = 2 })
	if err == nil || !strings.Contains(err.Error(), "a group of 2 ranks over 2 nodes needs other nodes to start ranks on") {
		t.Fatalf("err %v; want the group's missing other nodes named", err)
	}
}
