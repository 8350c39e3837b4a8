package policy

import (
	"errors"
	"testing"
	"time"
)

// Each typed change applies whole or fails with a *ChangeError that names
// it and wraps the cause; a refused change leaves the table as it was.
func TestStepChanges(t *testing.T) {
	now := time.Unix(100, 0)
	c := newCore(t, nil, "http://a")
	steps := []struct {
		ch      Change
		wantErr error
	}{
		{AddReplica{URL: "http://b", Version: 4}, nil},
		{AddReplica{URL: "http://b", Version: 9}, ErrDuplicateReplica},
		{SetVersion{URL: "http://a", Version: 3}, nil},
		{SetVersion{URL: "http://gone", Version: 3}, ErrUnknownReplica},
		{SetState{URL: "http://a", State: Paused}, nil},
		{SetState{URL: "http://a", State: State(99)}, nil}, // cause checked below: not a sentinel
		{SetHealth{URL: "http://b", Healthy: false}, nil},
		{SetMinVersion{Version: 5}, nil},
		{RaiseMinVersion{Version: 2}, nil},
		{ObserveMetrics{URL: "http://a", Queue: 7, KVUsage: 0.5}, nil},
		{RemoveReplica{URL: "http://gone"}, ErrUnknownReplica},
		{AddReplica{URL: ""}, ErrUnknownReplica},
	}
	for _, s := range steps {
		err := c.Step(now, s.ch)
		var ce *ChangeError
		switch {
		case s.ch == (SetState{URL: "http://a", State: State(99)}):
			if !errors.As(err, &ce) || ce.Change != s.ch {
				t.Errorf("%s: err %v, want a ChangeError naming it", s.ch, err)
			}
		case s.wantErr == nil && err != nil:
			t.Errorf("%s: %v", s.ch, err)
		case s.wantErr != nil && (!errors.Is(err, s.wantErr) || !errors.As(err, &ce) || ce.Change != s.ch):
			t.Errorf("%s: err %v, want a ChangeError wrapping %v", s.ch, err, s.wantErr)
		}
	}
	b, _ := c.Replica("http://b")
	if b.Version != 4 || b.Healthy {
		t.Errorf("b = version %d healthy %v; want 4 (duplicate add refused whole), false", b.Version, b.Healthy)
	}
	a, _ := c.Replica("http://a")
	if a.Version != 3 || a.State != Paused || a.QueueLen != 7 || a.KVUsage != 0.5 || !a.MetricsAt.Equal(now) {
		t.Errorf("a = %+v; want version 3, paused, queue 7, kv 0.5 at the step's now", a)
	}
	if c.MinVersion() != 5 {
		t.Errorf("min version %d; want 5 (a lower raise is ignored)", c.MinVersion())
	}
	if err := c.Step(now, RaiseMinVersion{Version: 8}); err != nil || c.MinVersion() != 8 {
		t.Errorf("raise to 8: %v, min %d", err, c.MinVersion())
	}
	at := now.Add(-time.Second)
	if err := c.Step(now, ObserveMetrics{URL: "http://a", Queue: 1, At: at}); err != nil {
		t.Fatal(err)
	}
	if a, _ := c.Replica("http://a"); !a.MetricsAt.Equal(at) {
		t.Errorf("metrics at %v; want the change's own At %v", a.MetricsAt, at)
	}
	if err := c.Step(now, RemoveReplica{URL: "http://b"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Replica("http://b"); ok {
		t.Error("b still present after RemoveReplica")
	}
	if err := c.Step(now, nil); err == nil {
		t.Error("nil change accepted")
	}
}
