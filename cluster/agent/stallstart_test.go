package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/cluster/internal/clustertest"
	"github.com/asyncrl/asyncrl/cluster/placement"
	"github.com/asyncrl/asyncrl/cluster/term"
	"github.com/asyncrl/asyncrl/cluster/termwatch"
	"github.com/asyncrl/asyncrl/internal/syncbuf"
)

// Issue 37, a stalled start is a failed start: a holder whose term
// cannot start — here no member has the engine role, so no engine ever
// loads the term's version 0 — steps down StartAfter after its claim,
// saying how far the start got, and contends again; once an engine node
// joins, a term starts and the run completes with a clean ledger. Before,
// the term sat on the lease silently until --stall-after (10 minutes).
func TestStalledStartStepsDownAndRetries(t *testing.T) {
	url := externalBus(t)
	var ev, evj syncbuf.Buffer
	const startAfter = 10 * time.Second
	a1 := testAgent(t, url, Config{Name: "n1", Roles: []string{placement.Trainer}, Run: agentRunConfig(t, 3),
		Events: &ev, EventsJSON: &evj, StartAfter: startAfter})
	defer a1.Stop()
	clustertest.WaitFor(t, 3*startAfter, "n1's term to step down for a stalled start", func() bool {
		return strings.Contains(ev.String(), "lease trainer resigned (stalled)")
	})
	recs := readEventRecords(t, []byte(evj.String()))
	var down, failed *EventRecord
	for i, r := range recs {
		switch {
		case r.Kind == term.Watch.String() && r.StepDown && down == nil:
			down = &recs[i]
		case r.Kind == term.TermFailed.String() && failed == nil:
			failed = &recs[i]
		}
	}
	if down == nil || down.Reason != string(termwatch.NoStart) || failed == nil {
		t.Fatalf("no no_start step-down and term failure in the events:\n%s", ev.String())
	}
	acquired := ofKind(recs, term.LeaseAcquired)
	if took := down.Time.Sub(acquired[0].Time); took < startAfter || took > startAfter+5*time.Second {
		t.Errorf("stepped down %s after acquiring the lease; want StartAfter (%s)", took, startAfter)
	}
	for _, want := range []string{"term stalled (no_start)", `last phase "actors started, waiting for an engine to serve version 0"`,
		"no member advertises an engine"} {
		if !strings.Contains(failed.Err, want) {
			t.Errorf("the step-down's reason %q lacks %q", failed.Err, want)
		}
	}
	// It contends again; with an engine node, a term starts and trains.
	a2 := testAgent(t, url, Config{Name: "n2", Roles: []string{placement.Engine}, Join: []string{a1.ms.Addr()}, Run: agentRunConfig(t, 3)})
	defer a2.Stop()
	clustertest.WaitFor(t, 3*time.Minute, "n1 to finish the run once an engine joined", func() bool {
		_, ok := a1.FinalLedger()
		return ok
	})
	if n := strings.Count(ev.String(), "lease trainer acquired"); n < 2 {
		t.Errorf("n1 acquired the lease %d times; want a retry after the stalled start", n)
	}
	if c, _ := a1.FinalLedger(); c.Trained != 3*agentRunConfig(t, 3).Trainer.MiniBatchSize || c.InFlight != 0 || c.Refused != 0 {
		t.Errorf("final ledger %+v", c)
	}
}
