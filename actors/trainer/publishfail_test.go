package trainer

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/publisher"
	"github.com/asyncrl/asyncrl/actors/trainer/steprule"
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

// retrying is a trainer config whose publish is tried attempts times, 10
// ms apart (doubling).
func retrying(attempts int) func(*Config) {
	return func(c *Config) {
		c.PublishRetry = steprule.Retry{Attempts: attempts, Backoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond}
	}
}

// TestFailedPublishIsNotAcknowledged: a step whose publish fails after
// the trainer stepped is not announced and not kept; the step rule
// publishes the same weights again after its wait (the trainer never
// steps twice on the batch; no retransmission is needed), the run does
// not end meanwhile (Err stays nil), and only the publish that succeeds
// answers the batch — with the step's record.
func TestFailedPublishIsNotAcknowledged(t *testing.T) {
	pub := &flakyPublisher{fails: 2}
	bus, a, ptr, next := startBuiltin(t, pub, retrying(3))

	sendTrain(t, bus, 1)
	sd := next()
	attempts, published, models := pub.state()
	if attempts != 3 || len(published) != 1 || published[0] != 1 {
		t.Fatalf("StepDone %v answered after %d publish attempts (published %v): a step must be announced only once its version is published",
			sd, attempts, published)
	}
	if err := a.Err(); err != nil {
		t.Fatalf("Err() = %v after a publish that succeeded on its third try: a retried publish must not stop training", err)
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

// TestPublishGivesUp: a publish that keeps failing is tried
// PublishRetry.Attempts times in all — retransmissions of the batch do
// not add tries — and then Err stops training with an error that names
// the step, the version, the tries and the publisher's failure.
func TestPublishGivesUp(t *testing.T) {
	pub := &flakyPublisher{fails: 1 << 30}
	bus, a, ptr, _ := startBuiltin(t, pub, retrying(2))
	sendTrain(t, bus, 1)
	pub.waitAttempts(t, 1)
	sendTrain(t, bus, 1) // the controller's retransmissions
	sendTrain(t, bus, 1)
	waitErr(a)
	err := a.Err()
	if !errors.Is(err, errEnginesDown) || !strings.Contains(err.Error(), "version 1 not published after 2 attempts") {
		t.Fatalf("Err() = %v, want the give-up of version 1 after 2 attempts wrapping %v", err, errEnginesDown)
	}
	// (That no try follows a give-up is the step rule's, tested there.)
	if n, published, _ := pub.state(); n != 2 || len(published) != 0 {
		t.Fatalf("publisher called %d times (published %v), want 2 tries", n, published)
	}
	if ptr.Version() != 1 || len(a.Steps()) != 0 {
		t.Fatalf("trainer version %d, %d records: the step must be trained once and never recorded", ptr.Version(), len(a.Steps()))
	}
}

// TestFailedPublishStopsTrainingByDefault: with the zero PublishRetry
// the first failed publish stops training (one try).
func TestFailedPublishStopsTrainingByDefault(t *testing.T) {
	pub := &flakyPublisher{fails: 1}
	bus, a, _, _ := startBuiltin(t, pub)
	sendTrain(t, bus, 1)
	waitErr(a)
	if err := a.Err(); !errors.Is(err, errEnginesDown) || !strings.Contains(err.Error(), "after 1 attempts") {
		t.Fatalf("Err() = %v, want the give-up after 1 attempt", err)
	}
}

// afterFailing publishes every version and then fails what follows the
// publish (the cluster term's checkpoint) with errUpload.
type afterFailing struct{ flakyPublisher }

var errUpload = errors.New("upload cut")

func (p *afterFailing) Publish(ctx context.Context, w publisher.Weights, v int64) error {
	if err := p.flakyPublisher.Publish(ctx, w, v); err != nil {
		return err
	}
	return &AfterPublishError{Version: v, What: "checkpoint", Err: errUpload}
}

// TestGiveUpNamesTheCheckpoint: when the version is published every time
// and only the checkpoint after it fails, the step is retried as a failed
// publish and the give-up says the checkpoint failed — not that the
// version was not published.
func TestGiveUpNamesTheCheckpoint(t *testing.T) {
	pub := &afterFailing{}
	bus, a, _, _ := startBuiltin(t, pub, retrying(2))
	sendTrain(t, bus, 1)
	waitErr(a)
	err := a.Err()
	if !errors.Is(err, errUpload) || !strings.Contains(err.Error(), "the checkpoint of version 1 failed on each of 2 attempts") {
		t.Fatalf("Err() = %v, want the give-up naming the checkpoint of version 1 after 2 attempts, wrapping %v", err, errUpload)
	}
	if strings.Contains(err.Error(), "not published") {
		t.Fatalf("Err() = %v: the version was published, only its checkpoint failed", err)
	}
	if n, published, _ := pub.state(); n != 2 || len(published) != 2 {
		t.Fatalf("publisher called %d times (published %v), want 2 tries", n, published)
	}
}
