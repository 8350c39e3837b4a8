package discovery

import (
	"errors"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/router/policy"
)

// coreRouter steps a real routing core, as proxy.Router does.
type coreRouter struct {
	c   *policy.Core
	got []policy.Change
}

func (r *coreRouter) Apply(chs ...policy.Change) error {
	r.got = append(r.got, chs...)
	var errs []error
	for _, ch := range chs {
		errs = append(errs, r.c.Step(time.Unix(1, 0), ch))
	}
	return errors.Join(errs...)
}

// Apply sends discovery's changes as typed router changes in one batch;
// a duplicate add and changes about unknown replicas leave the table as
// discovery wants it and are dropped, other refusals come back.
func TestApplyTypedChanges(t *testing.T) {
	c, err := policy.New(policy.DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &coreRouter{c: c}
	at := time.Unix(5, 0)
	err = Apply(r, []Change{
		{Op: OpAdd, URL: "http://a"},
		{Op: OpAdd, URL: "http://a"}, // duplicate: tolerated
		{Op: OpVersion, URL: "http://a", Version: 3},
		{Op: OpState, URL: "http://a", State: Paused},
		{Op: OpHealth, URL: "http://gone", Healthy: true}, // unknown: tolerated
		{Op: OpMinVersion, Version: 2},
		{Op: OpMinVersion, Version: 1}, // lower: ignored
		{Op: OpMetrics, URL: "http://a", Queue: 4, KVUsage: 0.25, At: at},
	})
	if err != nil {
		t.Fatalf("tolerated refusals returned: %v", err)
	}
	if len(r.got) != 8 {
		t.Fatalf("%d changes sent in the batch, want 8", len(r.got))
	}
	a, ok := c.Replica("http://a")
	if !ok || a.Version != 3 || a.State != Paused || a.QueueLen != 4 || !a.MetricsAt.Equal(at) || c.MinVersion() != 2 {
		t.Fatalf("table: %+v min %d", a, c.MinVersion())
	}
	err = Apply(r, []Change{{Op: OpAdd, URL: ""}, {Op: OpState, URL: "http://a", State: State(42)}, {Op: Op(99)}})
	if !errors.Is(err, policy.ErrUnknownReplica) {
		t.Errorf("empty-URL add: %v; want ErrUnknownReplica returned", err)
	}
	if n := len(split(err)); n != 3 {
		t.Errorf("%d errors returned (%v), want 3: empty add, bad state, unknown op", n, err)
	}
}
