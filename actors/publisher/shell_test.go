package publisher

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/asyncrl/asyncrl/actors/publisher/tracker"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeRouter records what the shell told it, in order.
type fakeRouter struct {
	mu       sync.Mutex
	versions map[string]int64
	min      int64
	log      []string
}

func (r *fakeRouter) SetVersion(url string, v int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.versions == nil {
		r.versions = map[string]int64{}
	}
	r.versions[url] = v
	return nil
}

func (r *fakeRouter) SetMinVersion(v int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	// The property the shell promises: some engine serves the new minimum
	// before the router hears of it.
	ok := false
	for _, sv := range r.versions {
		ok = ok || sv >= v
	}
	if !ok {
		r.log = append(r.log, "min raised above every engine")
	}
	r.min = v
	return nil
}

type chanDispatcher chan tracker.Command

func (d chanDispatcher) Dispatch(c tracker.Command) { d <- c }

func newShell(t *testing.T, cfg Config) (*Shell, *fakeRouter, chanDispatcher) {
	t.Helper()
	r := &fakeRouter{}
	d := make(chanDispatcher, 16)
	s, err := New(cfg, nil, r, d)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []string{"e0", "e1"} {
		if _, err := s.Join(e, "http://"+e, 0); err != nil {
			t.Fatal(err)
		}
	}
	return s, r, d
}

func TestPublishWaitsForTheFirstAckAndGatesTheRouter(t *testing.T) {
	s, r, d := newShell(t, Config{})
	done := make(chan error, 1)
	go func() { done <- s.Publish(context.Background(), tracker.VersionInfo{Version: 1, DeltaBytes: 10}) }()
	for _, want := range []string{"e0", "e1"} {
		if c := <-d; c.Engine != want || c.Plan.String() != "plan from=0 target=1 deltas=1 bytes=10" {
			t.Fatalf("command %+v, want a 1-delta plan for %s", c, want)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("Publish returned %v before any engine acked", err)
	default:
	}
	if r.min != 0 {
		t.Fatalf("router min %d before any ack", r.min)
	}
	if ok, err := s.Ack("e1", 1); !ok || err != nil {
		t.Fatalf("ack: %v %v", ok, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if r.min != 1 || r.versions["http://e1"] != 1 || r.versions["http://e0"] != 0 {
		t.Fatalf("router min %d versions %v", r.min, r.versions)
	}
	if got := s.Engines(); got[0].Routable || !got[1].Routable {
		t.Fatalf("e0 must be out of rotation until it acks: %+v", got)
	}
	if ok, _ := s.Ack("e1", 1); ok || s.IgnoredAcks() != 1 {
		t.Fatal("a duplicate ack must be ignored and counted")
	}
	if len(r.log) > 0 {
		t.Fatal(r.log)
	}
}

func TestPublishFailsWhenEveryEngineFails(t *testing.T) {
	s, r, d := newShell(t, Config{})
	done := make(chan error, 1)
	go func() { done <- s.Publish(context.Background(), tracker.VersionInfo{Version: 1}) }()
	<-d
	<-d
	s.Failed("e0", 1, errors.New("disk full"))
	s.Leave("e1")
	if err := <-done; !errors.Is(err, ErrNoEngine) {
		t.Fatalf("err = %v, want ErrNoEngine", err)
	}
	if r.min != 0 {
		t.Fatalf("router min raised to %d with nothing serving it", r.min)
	}
	// A later version is dispatched to the failed engine again.
	go func() { done <- s.Publish(context.Background(), tracker.VersionInfo{Version: 2}) }()
	if c := <-d; c.Engine != "e0" || c.Plan.Target != 2 {
		t.Fatalf("command %+v", c)
	}
	if _, err := s.Ack("e0", 2); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil || r.min != 2 {
		t.Fatalf("err %v min %d", err, r.min)
	}
}

func TestPublishEndsWithContext(t *testing.T) {
	s, _, d := newShell(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Publish(ctx, tracker.VersionInfo{Version: 1}) }()
	<-d
	<-d
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if _, err := s.Ack("e0", 5); !errors.Is(err, tracker.ErrUnknownVersion) {
		t.Fatalf("ack of an unpublished version: %v", err)
	}
}

func TestAcksOverTheBus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	bus, err := natsbus.Connect(ctx, natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	r := &fakeRouter{}
	d := make(chanDispatcher, 4)
	s, err := New(Config{RunID: "run", Acks: "asyncrl.run.engines.*.ack", MinVersion: "asyncrl.run.weights", Sender: "publisher-0"}, bus, r, d)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mins := make(chan messages.MinVersionSet, 4)
	sub, err := bus.Subscribe("asyncrl.run.weights", func(m *transport.Msg) {
		if mv, err := messages.DecodeAs[messages.MinVersionSet](m.Data); err == nil {
			mins <- mv
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if _, err := s.Join("e0", "http://e0", 0); err != nil {
		t.Fatal(err)
	}
	go func() {
		<-d
		for _, run := range []string{"other", "run"} { // another run's ack is ignored
			data, _ := messages.Encode(messages.EngineVersionAck{Header: messages.Header{RunID: run, Sender: "e0", Version: 1}, Engine: "e0"})
			_ = bus.Publish(ctx, "asyncrl.run.engines.e0.ack", data)
		}
	}()
	if err := s.Publish(ctx, tracker.VersionInfo{Version: 1}); err != nil {
		t.Fatal(err)
	}
	if s.RouterMin() != 1 || s.IgnoredAcks() != 0 {
		t.Fatalf("router min %d ignored %d", s.RouterMin(), s.IgnoredAcks())
	}
	select {
	case mv := <-mins:
		if mv.MinVersion != 1 || mv.RunID != "run" || mv.Sender != "publisher-0" {
			t.Fatalf("announced %s", mv)
		}
	case <-ctx.Done():
		t.Fatal("no MinVersionSet on the bus")
	}
}

// TestRetryAfterNoEngine: the trainer publishes the same version again
// after ErrNoEngine; the retry dispatches the version again to the engine
// that failed it (it was only briefly unreachable) and settles once that
// engine acks; a retry that fails again is ErrNoEngine again.
func TestRetryAfterNoEngine(t *testing.T) {
	s, r, d := newShell(t, Config{})
	s.Leave("e1")
	done := make(chan error, 1)
	go func() { done <- s.Publish(context.Background(), tracker.VersionInfo{Version: 1}) }()
	<-d
	s.Failed("e0", 1, errors.New("connection refused"))
	if err := <-done; !errors.Is(err, ErrNoEngine) {
		t.Fatalf("err = %v, want ErrNoEngine", err)
	}
	// A retry the engine fails again.
	go func() { done <- s.Publish(context.Background(), tracker.VersionInfo{Version: 1}) }()
	if c := nextCommand(t, d); c.Engine != "e0" || c.Plan.Target != 1 {
		t.Fatalf("retry dispatched %+v, want e0 to version 1", c)
	}
	s.Failed("e0", 1, errors.New("connection refused"))
	if err := <-done; !errors.Is(err, ErrNoEngine) {
		t.Fatalf("retry failed by every engine: %v, want ErrNoEngine", err)
	}
	// A retry the engine, back, loads.
	go func() { done <- s.Publish(context.Background(), tracker.VersionInfo{Version: 1}) }()
	if c := nextCommand(t, d); c.Engine != "e0" || c.Plan.Target != 1 {
		t.Fatalf("retry dispatched %+v, want e0 to version 1", c)
	}
	if _, err := s.Ack("e0", 1); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil || r.min != 1 {
		t.Fatalf("retry: %v, router min %d", err, r.min)
	}
	// A retry of a version some engine serves succeeds at once and
	// dispatches nothing.
	if err := s.Publish(context.Background(), tracker.VersionInfo{Version: 1}); err != nil {
		t.Fatalf("retry of a live version: %v", err)
	}
	select {
	case c := <-d:
		t.Fatalf("a retry of a live version dispatched %+v", c)
	default:
	}
}

// nextCommand is the next command dispatched, waiting up to 10 s.
func nextCommand(t *testing.T, d chanDispatcher) tracker.Command {
	t.Helper()
	select {
	case c := <-d:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no command dispatched in 10 s")
		return tracker.Command{}
	}
}
