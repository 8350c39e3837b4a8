package trainer

import (
	"context"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/publisher"
)

// gatedPublisher blocks each Publish until the test releases it.
type gatedPublisher struct {
	recordingPublisher
	entered, release chan struct{}
}

func (p *gatedPublisher) Publish(ctx context.Context, w publisher.Weights, v int64) error {
	p.entered <- struct{}{}
	select {
	case <-p.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return p.recordingPublisher.Publish(ctx, w, v)
}

// TestRetransmissionWhileTrainingIsAnsweredAfter: the step rule's queue
// through the real shell — a retransmission of the batch being trained
// waits, is not trained again, and is answered with a second StepDone
// once the step is done (the simulator's trainer now does the same).
func TestRetransmissionWhileTrainingIsAnsweredAfter(t *testing.T) {
	pub := &gatedPublisher{entered: make(chan struct{}, 1), release: make(chan struct{})}
	bus, a, ptr, next := startBuiltin(t, pub)
	sendTrain(t, bus, 1)
	select {
	case <-pub.entered: // step 1 trained, its publish in progress
	case <-time.After(10 * time.Second):
		t.Fatal("step 1 never reached its publish")
	}
	sendTrain(t, bus, 1) // the controller's retransmission
	deadline := time.Now().Add(10 * time.Second)
	for a.box.Len() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if a.box.Len() != 1 {
		t.Fatalf("the retransmission is not waiting in the inbox (%d)", a.box.Len())
	}
	close(pub.release)
	first, second := next(), next()
	if first.Step != 1 || first.NewVersion != 1 || first.Stats["tokens"] != 6 {
		t.Fatalf("first StepDone %v, want step 1's with its record", first)
	}
	if second.Step != 1 || second.NewVersion != 1 || second.Stats["tokens"] != 0 {
		t.Fatalf("second StepDone %v, want step 1 said again without a record", second)
	}
	pub.mu.Lock()
	defer pub.mu.Unlock()
	if len(pub.versions) != 1 || ptr.Version() != 1 || a.StepCount() != 1 || a.Err() != nil {
		t.Fatalf("published %v, trainer version %d, steps %d, err %v: want one step", pub.versions, ptr.Version(), a.StepCount(), a.Err())
	}
}
