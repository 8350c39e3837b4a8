package trainer

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/publisher"
	"github.com/asyncrl/asyncrl/actors/trainer/microbatch"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// countingStepper takes "steps" instantly: only the actor's bookkeeping
// is under test.
type countingStepper struct{ v int64 }

func (s *countingStepper) Version() int64 { return s.v }

func (s *countingStepper) Step(context.Context, Prepared) (model.StepStats, publisher.Weights, error) {
	s.v++
	return model.StepStats{}, publisher.Weights{}, nil
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
	var mu sync.Mutex
	var seen []int64 // OnStep runs in the trainer's goroutine, before StepDone
	a, err := StartStepper(bus, &countingStepper{}, &recordingPublisher{}, Config{RunID: "r", Name: "t", NormStd: true,
		Microbatch: microbatch.DefaultConfig(), Subjects: Subjects{Train: "T", Steps: "S"},
		OnStep: func(r StepRecord) { mu.Lock(); seen = append(seen, r.Step); mu.Unlock() }})
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
		mu.Lock()
		ok := len(seen) == int(step) && seen[step-1] == step
		mu.Unlock()
		if !ok {
			t.Fatalf("OnStep saw %v before StepDone %d", seen, step)
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
	since, next3 := a.StepsSince(n - 3)
	if len(since) != 3 || next3 != n || since[0].Step != int64(n-2) || fmt.Sprint(since[2].GroupIDs) != "[g]" {
		t.Fatalf("StepsSince(%d) = %+v, next %d", n-3, since, next3)
	}
	if r, nx := a.StepsSince(n); r != nil || nx != n {
		t.Fatal("StepsSince past the end")
	}
	if r, _ := a.StepsSince(-1); len(r) != n {
		t.Fatal("StepsSince before the start")
	}
}

// TestStepRecordsKeptAreTheNewest: the actor keeps only the newest
// RecordsKept records (the rest went to OnStep); a poller behind them
// gets the oldest kept and a next index that says what it missed.
func TestStepRecordsKeptAreTheNewest(t *testing.T) {
	a := &Actor{}
	total := RecordsKept + 100
	for i := 1; i <= total; i++ {
		a.keep(StepRecord{Step: int64(i), Version: int64(i), GroupIDs: []string{fmt.Sprint("g", i)}})
	}
	if a.StepCount() != total || len(a.rows) != RecordsKept {
		t.Fatalf("count %d, rows %d; want %d and %d", a.StepCount(), len(a.rows), total, RecordsKept)
	}
	recs, next := a.StepsSince(10)
	if len(recs) != RecordsKept || next != total || recs[0].Step != 101 || recs[len(recs)-1].Step != int64(total) {
		t.Fatalf("StepsSince(10): %d records %d..%d, next %d", len(recs), recs[0].Step, recs[len(recs)-1].Step, next)
	}
	if missed := next - len(recs) - 10; missed != 90 {
		t.Fatalf("a poller at 10 missed %d records, want 90", missed)
	}
	tail, next := a.StepsSince(total - 2)
	if len(tail) != 2 || next != total || tail[0].Step != int64(total-1) || tail[1].GroupIDs[0] != fmt.Sprint("g", total) {
		t.Fatalf("StepsSince(total-2) = %+v, next %d", tail, next)
	}
	if recs[0].GroupIDs != nil {
		t.Fatal("an old record kept its group ids")
	}
}
