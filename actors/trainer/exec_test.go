package trainer

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors/publisher"
	"github.com/asyncrl/asyncrl/actors/trainer/bridge"
	"github.com/asyncrl/asyncrl/actors/trainer/microbatch"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// execChildEnv makes the test binary the exec backend's child: the
// built-in child, SIGKILLing itself once after step
// ASYNCRL_TEST_TRAINER_CHILD_DIE_AT's state is written (marker in
// ASYNCRL_TEST_TRAINER_CHILD_MARKS).
const execChildEnv = "ASYNCRL_TEST_TRAINER_CHILD"

func runExecChild() int {
	dieAt, _ := strconv.ParseInt(os.Getenv("ASYNCRL_TEST_TRAINER_CHILD_DIE_AT"), 10, 64)
	c := &bridge.BuiltinChild{Hook: func(step int64, phase string) {
		if phase != bridge.PhaseSaved || step != dieAt {
			return
		}
		f, err := os.OpenFile(filepath.Join(os.Getenv("ASYNCRL_TEST_TRAINER_CHILD_MARKS"), "died"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return // died once already
		}
		f.Close()
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}}
	if err := c.Serve(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

type modelPublisher struct {
	mu       sync.Mutex
	versions []int64
	last     *model.Model
}

func (p *modelPublisher) Publish(_ context.Context, w publisher.Weights, v int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.versions = append(p.versions, v)
	p.last = w.Model
	return nil
}

func servingBytes(t *testing.T, m *model.Model) []byte {
	t.Helper()
	dir := t.TempDir()
	if err := m.SaveServing(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// trainBatch is step's TrainBatch: 2 groups of 2, rewards varying by step.
func trainBatch(t *testing.T, step int64) []byte {
	t.Helper()
	tb, _ := messages.NewTokenBatch(messages.BatchSpec{Vocab: 98})
	for i := range 4 {
		tr := traj(fmt.Sprint(step, i), fmt.Sprint("g", i/2), float32((int64(i)+step)%2), int32(step-1), int32(step-1))
		tr.TokenIDs[1] = int32(10 + (int64(i)+step)%20)
		if err := tb.Append(tr); err != nil {
			t.Fatal(err)
		}
	}
	ids, refs := inlineRefs(t, tb)
	out, err := messages.Encode(messages.TrainBatch{Header: messages.Header{RunID: "r"}, Step: step, GroupIDs: ids, Groups: refs})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestExecActorTrainsOverTheBridge: the trainer actor with the exec
// backend (the test binary as the child, killed once after step 2's state
// is written) trains steps 1–3 from the bus, publishes each version and
// announces StepDone; the weights it publishes at the end equal the
// in-process built-in trainer's on the same batches from the same initial
// weights — the bridge changes where the step runs, not what it computes,
// and the restart trained step 2 exactly once.
func TestExecActorTrainsOverTheBridge(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	m, _ := model.New(model.DefaultConfig(), 1)
	initDir := filepath.Join(dir, "init")
	if err := m.SaveServing(initDir); err != nil {
		t.Fatal(err)
	}
	tcfg := model.DefaultTrainerConfig()
	tcfg.Workers = max(1, min(runtime.GOMAXPROCS(0), 4)) // what the child runs with
	mb := microbatch.DefaultConfig()
	mb.MaxTokensPerMicrobatch = 8 // several microbatches per step
	in, err := bridge.InitFor(tcfg, true, "builtin", initDir, filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	marks := t.TempDir()
	ex, err := NewExec(ctx, bridge.Options{Spec: bridge.Spec{Argv: []string{os.Args[0]}, Env: []string{execChildEnv + "=1",
		"ASYNCRL_TEST_TRAINER_CHILD_DIE_AT=2", "ASYNCRL_TEST_TRAINER_CHILD_MARKS=" + marks}},
		Init: in, StepTimeout: 30 * time.Second, Restarts: 2, Backoff: 10 * time.Millisecond, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close(ctx)

	bus, err := natsbus.Connect(ctx, natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	pub := &modelPublisher{}
	next := expect[messages.StepDone](t, bus, "S")
	a, err := StartStepper(bus, ex, pub, Config{RunID: "r", Name: "t", NormStd: true, Microbatch: mb,
		Subjects: Subjects{Train: "T", Steps: "S"}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop(ctx)
	for step := int64(1); step <= 3; step++ {
		if err := bus.Publish(ctx, "T", trainBatch(t, step)); err != nil {
			t.Fatal(err)
		}
		sd := next()
		if sd.Step != step || sd.NewVersion != step || sd.Stats["tokens"] != 12 || sd.Stats["grad_norm"] <= 0 {
			t.Fatalf("step %d: StepDone %v", step, sd)
		}
	}
	if a.Err() != nil {
		t.Fatal(a.Err())
	}
	if ex.Restarts() != 1 {
		t.Errorf("restarts %d, want 1 (the child died once)", ex.Restarts())
	}
	if recs := a.Steps(); len(recs) != 3 || recs[2].Microbatches < 2 {
		t.Fatalf("records %+v", recs)
	}

	// The same batches through the in-process built-in trainer.
	m0, err := model.LoadServing(initDir)
	if err != nil {
		t.Fatal(err)
	}
	ptr, err := model.NewTrainer(m0, tcfg)
	if err != nil {
		t.Fatal(err)
	}
	for step := int64(1); step <= 3; step++ {
		env, _ := messages.DecodeAs[messages.TrainBatch](trainBatch(t, step))
		tb := inlineBatch(t, env)
		p, err := Prepare(tb, true, mb, step-1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Train(ptr, p); err != nil {
			t.Fatal(err)
		}
	}
	pub.mu.Lock()
	defer pub.mu.Unlock()
	if fmt.Sprint(pub.versions) != "[1 2 3]" {
		t.Fatalf("published versions %v", pub.versions)
	}
	if !bytes.Equal(servingBytes(t, pub.last), servingBytes(t, ptr.ServingCopy())) {
		t.Errorf("version 3 from the exec backend differs from the built-in trainer's")
	}
}

func TestFrameBatchLayout(t *testing.T) {
	tb, _ := messages.NewTokenBatch(messages.BatchSpec{Vocab: 98})
	_ = tb.Append(traj("a", "g", 1, 4, 5))
	_ = tb.Append(traj("b", "g", 0, 5))
	p, err := Prepare(tb, true, microbatch.DefaultConfig(), 5)
	if err != nil {
		t.Fatal(err)
	}
	f := FrameBatch(p, 6)
	if f.Step != 6 || fmt.Sprint(f.Groups) != "[g g]" || len(f.Microbatches) != 1 || len(f.Microbatches[0]) != 2 {
		t.Fatalf("frame %+v", f)
	}
	if got := f.Arrays["seq_offsets"].Int64s(); fmt.Sprint(got) != "[0 3 5]" {
		t.Errorf("seq_offsets %v", got)
	}
	if got := f.Arrays["versions"].Int64s(); fmt.Sprint(got) != "[-1 4 5 -1 5]" {
		t.Errorf("versions %v (prompt tokens −1)", got)
	}
	if got := f.Arrays["loss_mask"].Data; fmt.Sprint(got) != "[0 1 1 0 1]" {
		t.Errorf("loss_mask %v", got)
	}
	if got := f.Arrays["rewards"].Float32s(); fmt.Sprint(got) != "[1 0]" {
		t.Errorf("rewards %v", got)
	}
	if got := f.Arrays["advantages"].Float32s(); !(got[0] > 0 && got[1] < 0) {
		t.Errorf("advantages %v", got)
	}
	for name, a := range f.Arrays {
		want := map[string]int{"advantages": 2, "rewards": 2, "seq_offsets": 3}[name]
		if want == 0 {
			want = 5
		}
		if a.Shape[0] != int64(want) {
			t.Errorf("%s: shape %v, want [%d]", name, a.Shape, want)
		}
	}
}
