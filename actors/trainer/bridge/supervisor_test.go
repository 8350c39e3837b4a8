package bridge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/internal/syncbuf"
	"github.com/asyncrl/asyncrl/model"
)

type harness struct {
	dir   string
	steps string // the child's record of replied steps
	log   *syncbuf.Buffer
	opts  Options
}

// newHarness: initial weights of a seeded built-in policy, the test binary
// as the child with env (fault injection), fast restarts.
func newHarness(t *testing.T, env ...string) *harness {
	t.Helper()
	dir := t.TempDir()
	m, err := model.New(model.DefaultConfig(), 7)
	if err != nil {
		t.Fatal(err)
	}
	initDir := filepath.Join(dir, "init")
	if err := m.SaveServing(initDir); err != nil {
		t.Fatal(err)
	}
	in, err := InitFor(model.DefaultTrainerConfig(), true, "builtin", initDir, filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{dir: dir, steps: filepath.Join(dir, "steps.txt"), log: &syncbuf.Buffer{}}
	marks := filepath.Join(dir, "marks")
	if err := os.Mkdir(marks, 0o755); err != nil {
		t.Fatal(err)
	}
	h.opts = Options{
		Spec: Spec{Argv: []string{os.Args[0]}, Env: append([]string{"ASYNCRL_TEST_BRIDGE_CHILD=1",
			"ASYNCRL_TEST_CHILD_MARKS=" + marks, "ASYNCRL_TEST_CHILD_STEPS=" + h.steps}, env...)},
		Init: in, StepTimeout: 20 * time.Second, InitTimeout: 20 * time.Second, Restarts: 3,
		Backoff: 10 * time.Millisecond, Logger: zerolog.New(h.log),
	}
	return h
}

// batch is step's mini-batch: 4 sequences in 2 groups, in 2 microbatches.
func batch(step int64) *TrainBatch {
	var tok []int32
	var off []int64
	var mask []uint8
	var lp []float32
	var ver []int64
	for i := range int64(4) {
		off = append(off, int64(len(tok)))
		seq := []int32{1, int32(10 + (step+i)%30), int32(20 + i), int32(40 + (step*i)%20), 60}
		for j, id := range seq {
			tok = append(tok, id)
			m := uint8(0)
			v := int64(-1)
			if j >= 3 {
				m, v = 1, step-1
			}
			mask = append(mask, m)
			ver = append(ver, v)
			lp = append(lp, -float32(j)/4)
		}
	}
	off = append(off, int64(len(tok)))
	return &TrainBatch{Step: step, Arrays: map[string]Tensor{
		"tokens": Int32Tensor(tok), "seq_offsets": Int64Tensor(off), "loss_mask": Uint8Tensor(mask),
		"rollout_logprobs": Float32Tensor(lp), "versions": Int64Tensor(ver),
		"rewards": Float32Tensor([]float32{1, 0, 0, 1}),
	}, Groups: []string{"g0", "g0", "g1", "g1"}, Microbatches: [][]int{{0, 2}, {1, 3}}}
}

// run trains steps 1..n and returns the last StepResult.
func (h *harness) run(t *testing.T, n int64) (*Supervisor, StepResult) {
	t.Helper()
	ctx := context.Background()
	s, err := Start(ctx, h.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(ctx) })
	var last StepResult
	for step := int64(1); step <= n; step++ {
		if last, err = s.Train(ctx, batch(step)); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
	return s, last
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sameWeights asserts two step results hold bit-identical weights and
// optimiser state (the state file carries the step count and RNG too).
func sameWeights(t *testing.T, got, want StepResult) {
	t.Helper()
	if !bytes.Equal(readFile(t, filepath.Join(got.Checkpoint, "model.safetensors")), readFile(t, filepath.Join(want.Checkpoint, "model.safetensors"))) {
		t.Errorf("serving weights differ from the uninterrupted run's")
	}
	if !bytes.Equal(readFile(t, filepath.Join(got.State, model.TrainerFileName)), readFile(t, filepath.Join(want.State, model.TrainerFileName))) {
		t.Errorf("trainer state differs from the uninterrupted run's")
	}
}

func TestChildTrainsSteps(t *testing.T) {
	h := newHarness(t)
	s, res := h.run(t, 2)
	if res.Step != 2 || s.Step() != 2 || s.Started() != 1 {
		t.Fatalf("result step %d, supervisor at %d, children %d", res.Step, s.Step(), s.Started())
	}
	// 4 sequences × 2 generated tokens.
	if res.Metrics["tokens"] != 8 || res.Metrics["grad_norm"] <= 0 {
		t.Errorf("metrics %v", res.Metrics)
	}
	// config.json's integers reach the child as CBOR integers.
	if v, ok := h.opts.Init.Model.Config["vocab_size"].(int64); !ok || v != int64(model.DefaultConfig().VocabSize) {
		t.Errorf("model.config vocab_size %#v, want an int64", h.opts.Init.Model.Config["vocab_size"])
	}
	if s.Worker()["name"] != "asyncrl-builtin" {
		t.Errorf("worker %v", s.Worker())
	}
	m, err := model.LoadServing(res.Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	init, _ := model.LoadServing(h.opts.Init.Model.Path)
	if bytes.Equal(readFile(t, filepath.Join(res.Checkpoint, "model.safetensors")), readFile(t, filepath.Join(h.opts.Init.Model.Path, "model.safetensors"))) || m == nil || init == nil {
		t.Errorf("two steps left the weights unchanged")
	}
	// The child's stderr reaches the log.
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(h.log.String(), "test child: serving frames v1") {
		t.Errorf("child stderr not logged: %q", h.log.String())
	}
	// A full-state checkpoint on request.
	s2, _ := h.run(t, 0)
	rep, err := s2.SaveCheckpoint(context.Background(), filepath.Join(h.dir, "saved"))
	if err != nil || rep.Dir != filepath.Join(h.dir, "saved") {
		t.Fatalf("SaveCheckpoint: %+v, %v", rep, err)
	}
	if _, err := model.LoadTrainer(rep.Dir); err != nil {
		t.Errorf("saved state does not load: %v", err)
	}
}

func TestChildErrorNamesFieldAndChildKeepsServing(t *testing.T) {
	h := newHarness(t)
	s, _ := h.run(t, 0)
	ctx := context.Background()
	bad := batch(1)
	bad.Arrays["loss_mask"] = Uint8Tensor(make([]uint8, 3))
	_, err := s.Train(ctx, bad)
	var ce *ChildError
	if !errors.As(err, &ce) || ce.Code != CodeBadField || ce.Field != "arrays.loss_mask" {
		t.Fatalf("short loss_mask: %v, want bad_field arrays.loss_mask", err)
	}
	bad = batch(1)
	bad.Arrays["token_ids"] = bad.Arrays["tokens"]
	if _, err := s.Train(ctx, bad); !errors.As(err, &ce) || ce.Field != "arrays.token_ids" {
		t.Fatalf("unknown array: %v, want bad_field arrays.token_ids", err)
	}
	// Nothing was applied: step 1 trains now, on the same child, and
	// matches a run that never saw the bad batches.
	res, err := s.Train(ctx, batch(1))
	if err != nil || s.Started() != 1 {
		t.Fatalf("step 1 after refusals: %v, children %d", err, s.Started())
	}
	ref := newHarness(t)
	_, want := ref.run(t, 1)
	sameWeights(t, res, want)

	// An unknown loss key fails Init at once (a restart would repeat it).
	h2 := newHarness(t)
	h2.opts.Init.Loss["eps_clip_lo"] = 0.2
	_, err = Start(ctx, h2.opts)
	if !errors.As(err, &ce) || ce.Field != "loss.eps_clip_lo" {
		t.Fatalf("unknown loss key: %v, want bad_field loss.eps_clip_lo", err)
	}
}

func TestChildKilledMidStepIsRestartedAndTrainsTheStepOnce(t *testing.T) {
	ref := newHarness(t)
	_, want := ref.run(t, 5)

	h := newHarness(t, "ASYNCRL_TEST_CHILD_DIE_AT=3")
	s, got := h.run(t, 5)
	if s.Started() != 2 {
		t.Errorf("children started %d, want 2 (one restart)", s.Started())
	}
	if steps := strings.Fields(string(readFile(t, h.steps))); strings.Join(steps, ",") != "1,2,3,4,5" {
		t.Errorf("steps answered %v, want each of 1..5 once", steps)
	}
	sameWeights(t, got, want)
}

func TestHangingChildHitsDeadlineAndIsRestarted(t *testing.T) {
	ref := newHarness(t)
	_, want := ref.run(t, 3)

	h := newHarness(t, "ASYNCRL_TEST_CHILD_HANG_AT=2")
	h.opts.StepTimeout = 2 * time.Second
	s, got := h.run(t, 3)
	if s.Started() != 2 {
		t.Errorf("children started %d, want 2", s.Started())
	}
	if !strings.Contains(h.log.String(), "missed its deadline") {
		t.Errorf("the restart's log does not name the deadline: %s", h.log.String())
	}
	sameWeights(t, got, want)
}

func TestRestartsExhausted(t *testing.T) {
	h := newHarness(t, "ASYNCRL_TEST_CHILD_DIE_ALWAYS=2")
	h.opts.Restarts = 2
	s, _ := h.run(t, 1)
	_, err := s.Train(context.Background(), batch(2))
	if !errors.Is(err, ErrRestartsExhausted) || !errors.Is(err, ErrChildExited) {
		t.Fatalf("err %v, want ErrRestartsExhausted wrapping ErrChildExited", err)
	}
	for _, want := range []string{"step 2 failed 3 times", "trainer.exec_restarts 2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if s.Started() != 3 || s.Step() != 1 {
		t.Errorf("children %d (want 3: the first and 2 restarts), step %d (want 1)", s.Started(), s.Step())
	}
}

func TestStartNamesAMissingCommand(t *testing.T) {
	h := newHarness(t)
	h.opts.Spec = Spec{Argv: []string{filepath.Join(h.dir, "no-such-worker")}}
	_, err := Start(context.Background(), h.opts)
	if err == nil || !strings.Contains(err.Error(), "no-such-worker") {
		t.Fatalf("err %v, want one naming the command", err)
	}
}

func TestTrainRefusesAnOutOfOrderStep(t *testing.T) {
	h := newHarness(t)
	s, _ := h.run(t, 1)
	if _, err := s.Train(context.Background(), batch(3)); err == nil || !strings.Contains(err.Error(), "step 3") {
		t.Fatalf("step 3 after 1: %v", err)
	}
}

// TestSupersededStateDirsAreRemoved: each completed step deletes the
// previous step's state directory (nothing resumes from it any more), so
// a long run keeps one child state on disk, not one per step; the
// caller's Init.Resume directory is never deleted.
func TestSupersededStateDirsAreRemoved(t *testing.T) {
	h := newHarness(t)
	s, res := h.run(t, 3)
	if _, err := os.Stat(res.State); err != nil {
		t.Fatalf("the last step's state %s: %v", res.State, err)
	}
	for _, old := range []int64{1, 2} {
		dir := filepath.Join(filepath.Dir(res.State), strings.Replace(filepath.Base(res.State), "3", fmt.Sprint(old), 1))
		if dir == res.State {
			t.Fatalf("cannot name step %d's state from %s", old, res.State)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("step %d's state %s still on disk (%v)", old, dir, err)
		}
	}
	_ = s.Close(context.Background())

	// Resumed from a state the caller owns: it survives the next step.
	resume := filepath.Join(h.dir, "resume-from")
	if err := os.Rename(res.State, resume); err != nil {
		t.Fatal(err)
	}
	h.opts.Init.Resume, h.opts.Init.Step = &resume, 3
	s2, err := Start(context.Background(), h.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s2.Close(context.Background()) })
	if _, err := s2.Train(context.Background(), batch(4)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(resume); err != nil {
		t.Errorf("the caller's Init.Resume %s was removed: %v", resume, err)
	}
}
