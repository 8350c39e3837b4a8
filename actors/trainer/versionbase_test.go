package trainer

import (
	"context"
	"errors"
	"testing"

	"github.com/asyncrl/asyncrl/actors/trainer/microbatch"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// A trainer resumed at optimiser step 2 (as from a checkpoint) runs a new
// run whose version 0 is those weights: with VersionBase 2 the actor
// expects step 1, publishes and announces version 1, and measures
// staleness against local versions, while the wrapped trainer counts on
// (step 3, so Adam's bias correction continues).
func TestVersionBaseMakesBusVersionsLocal(t *testing.T) {
	ctx := context.Background()
	bus, err := natsbus.Connect(ctx, natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	m, _ := model.New(model.DefaultConfig(), 1)
	ptr, _ := model.NewTrainer(m, model.DefaultTrainerConfig())
	// Two steps before this run starts.
	for range 2 {
		tb, err := messages.DecodeAs[messages.TrainBatch](encodeTrain(t, 1))
		if err != nil {
			t.Fatal(err)
		}
		batch := inlineBatch(t, tb)
		p, err := Prepare(batch, true, microbatch.DefaultConfig(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Train(ptr, p); err != nil {
			t.Fatal(err)
		}
	}
	if ptr.Version() != 2 {
		t.Fatalf("setup: trainer version %d", ptr.Version())
	}
	cfg := Config{RunID: "r", Name: "t", NormStd: true, Microbatch: microbatch.DefaultConfig(),
		Subjects: Subjects{Train: "T", Steps: "S", Weights: "W"}}

	// A base that is not the trainer's version is refused up front: every
	// version on the bus would be shifted.
	pub := &recordingPublisher{}
	if a, err := Start(bus, ptr, pub, cfg); !errors.Is(err, ErrInvalidConfig) {
		if a != nil {
			_ = a.Stop(ctx)
		}
		t.Fatalf("VersionBase 0 on a trainer at version 2: err %v, want ErrInvalidConfig", err)
	}
	bad := cfg
	bad.VersionBase = -1
	if err := bad.Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("VersionBase -1: err %v", err)
	}

	next := expect[messages.StepDone](t, bus, "S")
	nextPublished := expect[messages.WeightsPublished](t, bus, "W")
	cfg.VersionBase = 2
	a, err := Start(bus, ptr, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop(ctx)
	sendTrain(t, bus, 1)
	sd := next()
	if sd.Step != 1 || sd.NewVersion != 1 || sd.Version != 0 || sd.Stats["staleness_max"] != 0 {
		t.Fatalf("StepDone = %v; want step 1, version 0 → 1, staleness 0 (tokens of local version 0)", sd)
	}
	if ptr.Version() != 3 {
		t.Fatalf("wrapped trainer version %d, want 3 (its own step count goes on)", ptr.Version())
	}
	if wp := nextPublished(); wp.Version != 1 || wp.BaseVersion != 1 || wp.Step != 1 {
		t.Fatalf("WeightsPublished = %v; want version 1", wp)
	}
	recs := a.Steps()
	if len(recs) != 1 || recs[0].Version != 1 || recs[0].Stats.Version != 1 {
		t.Fatalf("step records %+v; want one with version 1", recs)
	}
	// A redelivered step 1 re-announces local version 1; step 2 is next.
	sendTrain(t, bus, 1)
	if sd := next(); sd.Step != 1 || sd.NewVersion != 1 {
		t.Fatalf("redelivery: %v", sd)
	}
	sendTrain(t, bus, 2)
	if sd := next(); sd.Step != 2 || sd.NewVersion != 2 || ptr.Version() != 4 {
		t.Fatalf("step 2: %v, trainer version %d", sd, ptr.Version())
	}
	// Step 4 is from the future locally (the next is 3); checked against the
	// global version 4 it would pass for a redelivery.
	sendTrain(t, bus, 4)
	waitErr(a)
	if a.Err() == nil || ptr.Version() != 4 {
		t.Fatalf("future batch: err %v, version %d", a.Err(), ptr.Version())
	}
	pub.mu.Lock()
	defer pub.mu.Unlock()
	if len(pub.versions) != 2 || pub.versions[0] != 1 || pub.versions[1] != 2 {
		t.Fatalf("published versions %v, want [1 2]", pub.versions)
	}
}
