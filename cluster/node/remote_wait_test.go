package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/publisher"
	"github.com/asyncrl/asyncrl/actors/publisher/tracker"
	"github.com/asyncrl/asyncrl/cluster/discovery"
	"github.com/asyncrl/asyncrl/internal/syncbuf"
)

type nopRouter struct{}

func (nopRouter) SetVersion(string, int64) error { return nil }
func (nopRouter) SetMinVersion(int64) error      { return nil }

type nopDispatcher struct{}

func (nopDispatcher) Dispatch(tracker.Command) {}

// eventLog is a TermEngines that only prints its events (the waits call
// nothing else).
type eventLog struct{ w *syncbuf.Buffer }

func (eventLog) Attach(*EngineSet)                  {}
func (eventLog) RouterListening(string)             {}
func (eventLog) Target(string, int64)               {}
func (eventLog) RoutingChanged(discovery.Change)    {}
func (l eventLog) Event(format string, args ...any) { fmt.Fprintf(l.w, format+"\n", args...) }

// A term whose every engine node is gone waits for one before it
// publishes (the shell would fail the version with ErrNoEngine, and the
// trainer's step and the term with it), and says so once; a version all
// engines left while it was published waits until one serves it.
func TestPublishWaitsForAnEngine(t *testing.T) {
	sh, err := publisher.New(publisher.Config{Tracker: tracker.DefaultConfig(), RunID: "r"}, nil, nopRouter{}, nopDispatcher{})
	if err != nil {
		t.Fatal(err)
	}
	var ev syncbuf.Buffer
	r := &EngineSet{cfg: RemoteEngines{Term: eventLog{&ev}}, ws: &weightSync{shell: sh}}
	done := make(chan error, 1)
	go func() { done <- r.waitEngines(context.Background()) }()
	select {
	case err := <-done:
		t.Fatalf("returned (%v) with no engine registered", err)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := sh.Join("n3-engine-0", "http://127.0.0.1:1", tracker.NoVersion); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still waiting after an engine registered")
	}
	if n := strings.Count(ev.String(), "no engine to publish to"); n != 1 {
		t.Errorf("said it waits %d times, want once:\n%s", n, ev.String())
	}
	// A version every engine left while it was being published: wait
	// until one that joins serves it.
	served := make(chan error, 1)
	go func() { served <- r.waitServed(context.Background(), 0) }()
	select {
	case err := <-served:
		t.Fatalf("returned (%v) before any engine served the version", err)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := sh.Ack("n3-engine-0", 0); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still waiting after the engine acked the version")
	}
	sh.Leave("n3-engine-0")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.waitEngines(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled wait: %v", err)
	}
}
