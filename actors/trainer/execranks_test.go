package trainer

import (
	"context"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors/trainer/bridge"
	"github.com/asyncrl/asyncrl/actors/trainer/microbatch"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/model"
)

// torchChild is the PyTorch worker's argv and environment, or a skip
// where Debian's python3 lacks torch with gloo.
func torchChild(t *testing.T) ([]string, []string) {
	t.Helper()
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import numpy, cbor2, torch.distributed as d; assert d.is_available() and d.is_gloo_available()").Run(); err != nil {
		t.Skipf("%s with torch (gloo), numpy and cbor2 is needed for the PyTorch worker group: %v", py, err)
	}
	root, err := filepath.Abs(filepath.Join("..", "..", "integrations", "torch"))
	if err != nil {
		t.Fatal(err)
	}
	return []string{py, "-m", "asyncrl_worker"}, []string{"PYTHONPATH=" + root, "OMP_NUM_THREADS=1"}
}

// startTorchExec starts the torch worker (ranks of it) on the built-in
// policy saved in dir/init.
func startTorchExec(t *testing.T, dir string, ranks int, argv, env []string, rendezvous time.Duration) (*Exec, error) {
	return startTorchExecHook(t, dir, ranks, argv, env, rendezvous, nil)
}

// startTorchExecHook: opts adjust the supervisor's options (deadlines, a
// resume state) before the start.
func startTorchExecHook(t *testing.T, dir string, ranks int, argv, env []string, rendezvous time.Duration, onSent func(string, int), opts ...func(*bridge.Options)) (*Exec, error) {
	t.Helper()
	initDir := filepath.Join(dir, "init")
	if _, err := os.Stat(initDir); err != nil {
		m, _ := model.New(model.DefaultConfig(), 1)
		if err := m.SaveServing(initDir); err != nil {
			t.Fatal(err)
		}
	}
	in, err := bridge.InitFor(model.DefaultTrainerConfig(), true, "builtin", initDir, filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	o := bridge.Options{Spec: bridge.Spec{Argv: argv, Env: env}, Init: in,
		StepTimeout: 2 * time.Minute, Restarts: 1, Backoff: 10 * time.Millisecond, Logger: zerolog.Nop(),
		Ranks: ranks, Rendezvous: rendezvous, OnSent: onSent}
	for _, f := range opts {
		f(&o)
	}
	return NewExec(context.Background(), o)
}

// preparedSteps are steps 1–3's batches planned for dp ranks.
func preparedSteps(t *testing.T, dp int) []Prepared {
	t.Helper()
	mb := microbatch.DefaultConfig()
	mb.MaxTokensPerMicrobatch = 8 // several microbatches per rank
	mb.DPSize, mb.EqualSize = dp, dp > 1
	var out []Prepared
	for step := int64(1); step <= 3; step++ {
		env, _ := messages.DecodeAs[messages.TrainBatch](trainBatch(t, step))
		tb := inlineBatch(t, env)
		p, err := Prepare(tb, true, mb, step-1)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// TestExecTorchRanksTrainLikeOne: the same three global batches trained
// by one torch rank and by a group of two gloo ranks (each rank its half
// of the sequences, the gradients all-reduced) give the same loss and
// gradient norm at every step within float error, and the same weights;
// the group reports both ranks' figures.
func TestExecTorchRanksTrainLikeOne(t *testing.T) {
	argv, env := torchChild(t)
	ctx := context.Background()
	dir := t.TempDir()
	var stats [2][]model.StepStats
	var last [2]*model.Model
	for i, ranks := range []int{1, 2} {
		ex, err := startTorchExec(t, dir, ranks, argv, env, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range preparedSteps(t, ranks) {
			st, w, err := ex.Step(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			stats[i] = append(stats[i], st)
			last[i] = w.Model
		}
		rs := ex.RankStats()
		if err := ex.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if len(rs) != ranks {
			t.Fatalf("%d ranks: figures of %d ranks: %+v", ranks, len(rs), rs)
		}
		for r, s := range rs {
			if s.Rank != r || s.Steps != 3 || s.StepSeconds <= 0 || s.MemoryBytes <= 0 || (ranks > 1) != (s.AllReduceSeconds > 0) {
				t.Errorf("%d ranks: rank %d figures %+v", ranks, r, s)
			}
		}
	}
	for k := range stats[0] {
		a, b := stats[0][k], stats[1][k]
		if a.Tokens != b.Tokens || !near(a.Loss, b.Loss) || !near(a.GradNorm, b.GradNorm) || !near(a.Entropy, b.Entropy) {
			t.Errorf("step %d: one rank %+v, two ranks %+v", k+1, a, b)
		}
	}
	// the published BF16 weights give the same next-token logits
	va, vb := make([]float32, last[0].VocabSize()), make([]float32, last[1].VocabSize())
	for _, toks := range [][]int32{{1, 10, 11}, {1, 20, 21, 22}, {1, 5}} {
		last[0].NextLogits(toks, va)
		last[1].NextLogits(toks, vb)
		for v := range va {
			if d := math.Abs(float64(va[v] - vb[v])); d > 2e-2*max(1, math.Abs(float64(va[v]))) {
				t.Fatalf("logit %d after %v: one rank %v, two ranks %v", v, toks, va[v], vb[v])
			}
		}
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-5*max(1, math.Abs(a)) }

// TestExecTorchRankThatNeverJoins: rank 1's command never starts the
// worker, so rank 0's rendezvous times out: the start fails naming the
// rendezvous's address, rank 0's timeout and rank 1 as the one that never
// answered, and nothing was trained or written.
func TestExecTorchRankThatNeverJoins(t *testing.T) {
	argv, env := torchChild(t)
	dir := t.TempDir()
	// rank 1 sleeps instead of joining (it reads RANK, as torchrun's ranks do)
	wrap := []string{"/bin/sh", "-c", `if [ "$RANK" = 1 ]; then exec sleep 120; fi; exec "$@"`, "sh"}
	start := time.Now()
	ex, err := startTorchExec(t, dir, 2, append(wrap, argv...), env, 3*time.Second)
	if err == nil {
		_ = ex.Close(context.Background())
		t.Fatal("a group whose rank 1 never joins started")
	}
	msg := err.Error()
	for _, want := range []string{"rank 0 of 2", "rendezvous at tcp://127.0.0.1:", "group", "rank 1 of 2 had not answered its Init"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if took := time.Since(start); took > time.Minute {
		t.Errorf("the refusal took %v: the rendezvous bound is 3s", took)
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "out"))
	for _, e := range ents {
		t.Errorf("written although nothing trained: %s", e.Name())
	}
}

// TestExecTorchRankKilledMidStep: one rank of a two-rank group is
// SIGKILLed — or hangs (SIGSTOP: alive, silent, holding its peer in the
// all-reduce) — right after step 2's TrainBatch reached it. The step fails
// for the group (the death at once, the hang at exec_step_timeout): every
// rank is killed, a new group on a new port resumes from step 1's sharded
// state and trains step 2 again. The three steps' results equal an
// uninterrupted group's bit for bit — no batch lost, none trained twice.
func TestExecTorchRankKilledMidStep(t *testing.T) {
	argv, env := torchChild(t)
	ctx := context.Background()
	run := func(sig syscall.Signal) ([]model.StepStats, int) {
		var mu sync.Mutex
		sends := 0
		var stopped []int
		hook := func(typ string, pid int) {
			if typ != bridge.TypeTrainBatch {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if sends++; sig != 0 && sends == 3 { // step 2, the first rank it reached
				if err := syscall.Kill(pid, sig); err != nil {
					t.Errorf("signal %v to %d: %v", sig, pid, err)
				}
				stopped = append(stopped, pid)
			}
		}
		// A toy step takes well under a second; 30 s is a hang on any load.
		deadlines := func(o *bridge.Options) { o.StepTimeout, o.InitTimeout = 30*time.Second, 2*time.Minute }
		ex, err := startTorchExecHook(t, t.TempDir(), 2, argv, env, time.Minute, hook, deadlines)
		if err != nil {
			t.Fatal(err)
		}
		defer ex.Close(ctx)
		var out []model.StepStats
		for _, p := range preparedSteps(t, 2) {
			st, _, err := ex.Step(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, st)
		}
		mu.Lock()
		defer mu.Unlock()
		if want := 6 + map[bool]int{true: 2}[sig != 0]; sends != want {
			t.Errorf("signal %v: %d TrainBatch frames sent, want %d", sig, sends, want)
		}
		for _, pid := range stopped {
			if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("signal %v: the failed rank %d still exists (kill -0: %v)", sig, pid, err)
			}
		}
		return out, ex.Restarts()
	}
	want, r0 := run(0)
	if r0 != 0 {
		t.Errorf("%d restarts uninterrupted", r0)
	}
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP} {
		got, r1 := run(sig)
		if r1 != 1 {
			t.Errorf("%v: %d restarts, want 1", sig, r1)
		}
		for k := range want {
			if got[k] != want[k] {
				t.Errorf("%v: step %d: after the restart %+v, uninterrupted %+v", sig, k+1, got[k], want[k])
			}
		}
	}
}

// TestExecTorchGroupKilledOnCancel: a step whose context ends (the trainer
// actor's Stop when its term ends: a deposed holder) kills every rank of
// the group at once instead of letting the step run on; nothing of the
// step is returned.
func TestExecTorchGroupKilledOnCancel(t *testing.T) {
	argv, env := torchChild(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var pids []int
	hook := func(typ string, pid int) {
		if typ != bridge.TypeTrainBatch {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if pids = append(pids, pid); len(pids) == 2 {
			cancel() // both ranks hold step 1
		}
	}
	ex, err := startTorchExecHook(t, t.TempDir(), 2, argv, env, time.Minute, hook)
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close(context.Background())
	if _, _, err := ex.Step(ctx, preparedSteps(t, 2)[0]); !errors.Is(err, context.Canceled) {
		t.Fatalf("Step: %v, want the cancellation", err)
	}
	if ex.Version() != 0 || ex.State() != "" {
		t.Errorf("version %d state %q after a cancelled step", ex.Version(), ex.State())
	}
	mu.Lock()
	defer mu.Unlock()
	for _, pid := range pids {
		// Kill reaps the process before Step returns
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("rank pid %d still exists after the cancelled step (kill -0: %v)", pid, err)
		}
	}
}

// TestExecTorchStateOfAnotherWorldSize: a two-rank group's sharded state
// resumes in a group of three (data parallel replicates the moments:
// resharding regroups them); the same state with a shard gone cannot be
// resharded, and a group of three refuses it at start — every rank
// before the rendezvous, not retried — naming the missing shard, with
// nothing trained or written.
func TestExecTorchStateOfAnotherWorldSize(t *testing.T) {
	argv, env := torchChild(t)
	ctx := context.Background()
	dir := t.TempDir()
	ex, err := startTorchExec(t, dir, 2, argv, env, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ex.Step(ctx, preparedSteps(t, 2)[0]); err != nil {
		t.Fatal(err)
	}
	// keep step 1's state: the supervisor deletes its own states as it goes
	state := filepath.Join(t.TempDir(), "state-v1")
	if err := os.CopyFS(state, os.DirFS(ex.State())); err != nil {
		t.Fatal(err)
	}
	if err := ex.Close(ctx); err != nil {
		t.Fatal(err)
	}
	resume := func(o *bridge.Options) { o.Init.Resume, o.Init.Step = &state, 1 }

	three, err := startTorchExecHook(t, t.TempDir(), 3, argv, env, time.Minute, nil, resume)
	if err != nil {
		t.Fatalf("a group of three resuming a two-rank state: %v", err)
	}
	if v := three.Version(); v != 1 {
		t.Errorf("the group of three is at version %d, want 1", v)
	}
	if err := three.Close(ctx); err != nil {
		t.Fatal(err)
	}

	if err := os.Remove(filepath.Join(state, "optimizer-00001-of-00002.pt")); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	bad, err := startTorchExecHook(t, out, 3, argv, env, time.Minute, nil, resume)
	if err == nil {
		_ = bad.Close(ctx)
		t.Fatal("a group of three started from a two-rank state missing a shard")
	}
	var ce *bridge.ChildError
	if !errors.As(err, &ce) || ce.Field != "resume" || errors.Is(err, bridge.ErrRestartsExhausted) {
		t.Errorf("err %v; want the child's bad_field resume, not retried", err)
	}
	for _, want := range []string{"optimizer-00001-of-00002.pt", "2-rank state", "cannot be resumed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	ents, _ := os.ReadDir(filepath.Join(out, "out"))
	for _, e := range ents {
		t.Errorf("written although nothing trained: %s", e.Name())
	}
}
