package trainer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/trainer/microbatch"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/policy"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// countingStepper takes "steps" instantly: only the actor's bookkeeping
// is under test.
type countingStepper struct{ v int64 }

func (s *countingStepper) Version() int64 { return s.v }

func (s *countingStepper) Step(context.Context, Prepared) (policy.StepStats, Weights, error) {
	s.v++
	return policy.StepStats{}, Weights{}, nil
}

// TestStepRecordsStayO1PerStep (issue 37): the records of a long run keep
// their per-step figures, but a record's group ids are dropped once
// GroupIDsKept newer steps exist; a poller reads only what is new
// (StepCount, StepsSince).
func TestStepRecordsStayO1PerStep(t *testing.T) {
	ctx := context.Background()
	bus, err := natsbus.Connect(ctx, natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	next := expect[messages.StepDone](t, bus, "S")
	a, err := StartStepper(bus, &countingStepper{}, &recordingPublisher{}, Config{RunID: "r", Name: "t", NormStd: true,
		Microbatch: microbatch.DefaultConfig(), Subjects: Subjects{Train: "T", Steps: "S"}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop(ctx)
	n := GroupIDsKept + 20
	for step := int64(1); step <= int64(n); step++ {
		sendTrain(t, bus, step)
		if sd := next(); sd.Step != step {
			t.Fatalf("StepDone %d, want %d", sd.Step, step)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for a.StepCount() < n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if a.StepCount() != n {
		t.Fatalf("%d steps recorded, want %d", a.StepCount(), n)
	}
	all := a.Steps()
	for i, r := range all {
		if r.Step != int64(i+1) || r.Groups != 1 {
			t.Fatalf("record %d: step %d groups %d", i, r.Step, r.Groups)
		}
		want := i >= n-GroupIDsKept
		if got := len(r.GroupIDs) == 1; got != want {
			t.Fatalf("record of step %d keeps its group ids: %v, want %v (%v)", r.Step, got, want, r.GroupIDs)
		}
	}
	since := a.StepsSince(n - 3)
	if len(since) != 3 || since[0].Step != int64(n-2) || fmt.Sprint(since[2].GroupIDs) != "[g]" {
		t.Fatalf("StepsSince(%d) = %+v", n-3, since)
	}
	if a.StepsSince(n) != nil || len(a.StepsSince(-1)) != n {
		t.Fatal("StepsSince past the end or before the start")
	}
}
