package node

import (
	"context"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/tasks/openenv/openenvtest"
)

// TestRunEnvServersFailHangDie is the failure semantics of chat
// environments under `asyncrl run` (the built-in policy, OpenEnv-style
// servers, one episode each): while the run goes, one server answers
// every step with a 500, then one hangs (each step is given up after
// rollout.env.step_timeout), then one is killed (connection refused) and
// later revived. Every trajectory on a failing server is aborted with its
// reason — counted in summary.json as env_error or env_timeout — and its
// group requeued; the run still trains every step, every started
// trajectory is finished or aborted, none is lost, and the ledger settles
// every group at most once.
func TestRunEnvServersFailHangDie(t *testing.T) {
	// 30 steps, not 6: the echo servers answer at once and a 6-step run
	// took 0.5–0.9 s, close to the fault phases' own pace (its process
	// twin, TestRunOpenEnvProcessesHungKilled, ended first 1 run in 2).
	const steps = 30
	var srvs []*openenvtest.Server
	var urls []string
	for range 4 {
		s := openenvtest.New()
		t.Cleanup(s.Close)
		srvs = append(srvs, s)
		urls = append(urls, s.URL)
	}
	cfg := smallConfig(t, steps)
	cfg.Rollout.Task, cfg.Rollout.MaxTurns, cfg.Rollout.MaxTokens = "echo", 2, 4
	cfg.Rollout.Env.Protocol, cfg.Rollout.Env.URLs, cfg.Rollout.Env.ObservationField = config.EnvOpenEnv, urls, "echoed_message"
	cfg.Rollout.Env.StepTimeout = 300 * time.Millisecond
	cfg.Filter.Mode = config.FilterNone
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	phases := make(chan [3]int64, 1)
	n, s := runNode(t, cfg, func(n *Node) {
		go func() { phases <- faults(n, srvs) }()
	})
	var seen [3]int64
	select {
	case seen = <-phases:
	case <-time.After(time.Minute):
		t.Fatal("the fault phases did not end")
	}
	checkRanAllSteps(t, s, steps)
	checkLedger(t, n, s)
	if s.TrajectoriesLost != 0 || s.TrajectoriesStarted != s.TrajectoriesFinished+s.TrajectoriesAborted {
		t.Fatalf("started %d finished %d aborted %d lost %d", s.TrajectoriesStarted, s.TrajectoriesFinished, s.TrajectoriesAborted, s.TrajectoriesLost)
	}
	// Each phase ended only once its failure had been counted (or the run
	// had ended first: then the phase saw no failure and seen says 0).
	if seen[0] < 1 || seen[1] < 1 || seen[2] <= seen[0] {
		t.Fatalf("fault phases saw errors %d, timeouts %d, errors %d after the kill (the run ended before a fault was hit?)", seen[0], seen[1], seen[2])
	}
	if s.TrajectoriesAbortedEnvError < seen[0] || s.TrajectoriesAbortedEnvTimeout < seen[1] || s.TrajectoriesAbortedEnvError+s.TrajectoriesAbortedEnvTimeout > s.TrajectoriesAborted {
		t.Fatalf("summary counts env errors %d, timeouts %d of %d aborted; the phases saw %v",
			s.TrajectoriesAbortedEnvError, s.TrajectoriesAbortedEnvTimeout, s.TrajectoriesAborted, seen)
	}
	t.Logf("aborted %d (env errors %d, timeouts %d), groups requeued %d; phases saw %v",
		s.TrajectoriesAborted, s.TrajectoriesAbortedEnvError, s.TrajectoriesAbortedEnvTimeout, s.GroupsRequeuedAborted, seen)
	if s.GroupsRequeuedAborted < 1 {
		t.Fatalf("no aborted group requeued: %+v", s)
	}
}

// faults runs the three fault phases against the servers, each until the
// rollouts counted its failure (or 20 s): a 500-answering server, a hung
// one, a killed one (revived after). It returns the env errors after the
// first phase, the timeouts after the second and the errors after the
// third.
func faults(n *Node, srvs []*openenvtest.Server) [3]int64 {
	wait := func(cond func() bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for !cond() && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond) // polling a counter with a deadline
		}
	}
	var out [3]int64
	srvs[0].Fail.Store(true)
	wait(func() bool { return n.rolloutTotals().EnvErrors >= 1 })
	srvs[0].Fail.Store(false)
	out[0] = n.rolloutTotals().EnvErrors
	srvs[1].Hang.Store(true)
	wait(func() bool { return n.rolloutTotals().EnvTimeouts >= 1 })
	srvs[1].Hang.Store(false)
	out[1] = n.rolloutTotals().EnvTimeouts
	before := n.rolloutTotals().EnvErrors
	srvs[2].Kill()
	wait(func() bool { return n.rolloutTotals().EnvErrors > before })
	out[2] = n.rolloutTotals().EnvErrors
	_ = srvs[2].Revive()
	return out
}
