package trainer

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/asyncrl/asyncrl/actors/publisher"
	"github.com/asyncrl/asyncrl/actors/trainer/microbatch"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

func TestMain(m *testing.M) {
	if os.Getenv(execChildEnv) != "" {
		os.Exit(runExecChild()) // the test binary as the exec backend's child (exec_test.go)
	}
	goleak.VerifyTestMain(m)
}

type recordingPublisher struct {
	mu       sync.Mutex
	versions []int64
}

func (p *recordingPublisher) Publish(_ context.Context, _ publisher.Weights, v int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.versions = append(p.versions, v)
	return nil
}

func encodeTrain(t *testing.T, step int64) []byte {
	t.Helper()
	tb, _ := messages.NewTokenBatch(messages.BatchSpec{Vocab: 98})
	for i, r := range []float32{1, 0} {
		if err := tb.Append(traj(string(rune('a'+i)), "g", r, 0, 0)); err != nil {
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

func TestActorTrainsPublishesAndAnnounces(t *testing.T) {
	pub := &recordingPublisher{}
	bus, a, ptr, next := startBuiltin(t, pub)
	sendTrain(t, bus, 1)
	sd := next()
	if sd.Step != 1 || sd.NewVersion != 1 || sd.RewardMean != 0.5 || sd.Stats["tokens"] != 6 {
		t.Fatalf("StepDone = %v", sd)
	}
	// A redelivered batch for step 1 re-announces without training again.
	sendTrain(t, bus, 1)
	if sd := next(); sd.Step != 1 || sd.NewVersion != 1 || ptr.Version() != 1 {
		t.Fatalf("redelivery: %v, trainer version %d", sd, ptr.Version())
	}
	// A batch from the future is an error and trains nothing.
	sendTrain(t, bus, 5)
	waitErr(a)
	if a.Err() == nil || ptr.Version() != 1 {
		t.Fatalf("future batch: err %v, version %d", a.Err(), ptr.Version())
	}
	pub.mu.Lock()
	defer pub.mu.Unlock()
	if len(pub.versions) != 1 || pub.versions[0] != 1 || len(a.Steps()) != 1 {
		t.Fatalf("published %v, steps %d", pub.versions, len(a.Steps()))
	}
	// The record names the groups the step trained (the cluster agent
	// records them as trained together with the durable step).
	if g := a.Steps()[0].GroupIDs; len(g) != 1 || g[0] != "g" {
		t.Errorf("step 1 trained groups %v, want [g]", g)
	}
}

// waitErr waits (up to 10 s) until the actor reports a failed step.
func waitErr(a *Actor) {
	deadline := time.Now().Add(10 * time.Second)
	for a.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}

// expect subscribes to subject and returns a function that waits (up to
// 10 s) for the next message of type T there; the subscription ends with
// the test.
// startBuiltin starts the trainer actor with a built-in trainer on a
// bus of its own, publishing through pub (batches on T, StepDone on S);
// next reads the StepDone messages. Actor and bus stop at the test's end.
func startBuiltin(t *testing.T, pub publisher.Publisher, opts ...func(*Config)) (*natsbus.Bus, *Actor, *model.Trainer, func() messages.StepDone) {
	t.Helper()
	bus, err := natsbus.Connect(context.Background(), natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bus.Close() })
	m, _ := model.New(model.DefaultConfig(), 1)
	ptr, _ := model.NewTrainer(m, model.DefaultTrainerConfig())
	next := expect[messages.StepDone](t, bus, "S")
	cfg := Config{RunID: "r", Name: "t", NormStd: true, Microbatch: microbatch.DefaultConfig(),
		Subjects: Subjects{Train: "T", Steps: "S"}}
	for _, o := range opts {
		o(&cfg)
	}
	a, err := Start(bus, ptr, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Stop(context.Background()) })
	return bus, a, ptr, next
}

func expect[T messages.Message](t *testing.T, bus transport.Bus, subject string) func() T {
	t.Helper()
	ch := make(chan T, 8)
	sub, err := bus.Subscribe(subject, func(msg *transport.Msg) {
		if v, err := messages.DecodeAs[T](msg.Data); err == nil {
			ch <- v
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return func() T {
		t.Helper()
		select {
		case v := <-ch:
			return v
		case <-time.After(10 * time.Second):
			var zero T
			t.Fatalf("no %T on %s", zero, subject)
			return zero
		}
	}
}

// sendTrain publishes the TrainBatch of step on "T", the tests' train subject.
func sendTrain(t *testing.T, bus transport.Bus, step int64) {
	t.Helper()
	if err := bus.Publish(context.Background(), "T", encodeTrain(t, step)); err != nil {
		t.Fatal(err)
	}
}
