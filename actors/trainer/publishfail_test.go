package trainer

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/publisher"
	"github.com/asyncrl/asyncrl/model"
)

// flakyPublisher fails its first fails calls, then publishes.
type flakyPublisher struct {
	mu        sync.Mutex
	fails     int
	attempts  int
	published []int64
	models    []*model.Model
}

var errEnginesDown = errors.New("engines down")

func (p *flakyPublisher) Publish(_ context.Context, w publisher.Weights, v int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.attempts++
	p.models = append(p.models, w.Model)
	if p.attempts <= p.fails {
		return errEnginesDown
	}
	p.published = append(p.published, v)
	return nil
}

func (p *flakyPublisher) state() (attempts int, published []int64, models []*model.Model) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.attempts, append([]int64(nil), p.published...), append([]*model.Model(nil), p.models...)
}

// waitAttempts waits (up to 10 s) until the publisher was called n times.
func (p *flakyPublisher) waitAttempts(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if got, _, _ := p.state(); got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("publisher called fewer than %d times", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFailedPublishIsNotAcknowledged: a step whose publish fails after
// the trainer stepped is not announced and not kept; the controller's
// retransmissions of its batch publish the same weights again (the
// trainer never steps twice on the batch), and only the publish that
// succeeds answers it — with the step's record. Err reports each failure
// (a run ends on it).
func TestFailedPublishIsNotAcknowledged(t *testing.T) {
	pub := &flakyPublisher{fails: 2}
	bus, a, ptr, next := startBuiltin(t, pub)

	sendTrain(t, bus, 1)
	pub.waitAttempts(t, 1)
	waitErr(a)
	if !errors.Is(a.Err(), errEnginesDown) {
		t.Fatalf("after a failed publish Err() = %v, want it to wrap %v", a.Err(), errEnginesDown)
	}
	sendTrain(t, bus, 1) // the controller's retransmission: the publish fails again
	pub.waitAttempts(t, 2)
	sendTrain(t, bus, 1) // and again: now it succeeds
	sd := next()
	attempts, published, models := pub.state()
	if attempts != 3 || len(published) != 1 || published[0] != 1 {
		t.Fatalf("StepDone %v answered after %d publish attempts (published %v): a step must be announced only once its version is published",
			sd, attempts, published)
	}
	if sd.Step != 1 || sd.NewVersion != 1 || sd.Stats["tokens"] != 6 {
		t.Fatalf("StepDone = %v, want step 1, version 1 with the step's stats", sd)
	}
	if ptr.Version() != 1 {
		t.Fatalf("trainer version %d after one batch: its prompts were trained %d times", ptr.Version(), ptr.Version())
	}
	if models[0] == nil || models[1] != models[0] || models[2] != models[0] {
		t.Fatalf("retries published other weights than the step's: %p %p %p", models[0], models[1], models[2])
	}
	if recs := a.Steps(); len(recs) != 1 || recs[0].Step != 1 || recs[0].Version != 1 {
		t.Fatalf("step records %+v, want step 1 once", recs)
	}
	// The step is live now: the next step trains on it.
	sendTrain(t, bus, 2)
	if sd := next(); sd.Step != 2 || sd.NewVersion != 2 || ptr.Version() != 2 {
		t.Fatalf("next step: %v, trainer version %d", sd, ptr.Version())
	}
}
