package agent

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/cluster/internal/clustertest"
	"github.com/asyncrl/asyncrl/cluster/placement"
	"github.com/asyncrl/asyncrl/cluster/term"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/internal/syncbuf"
)

// A node whose terms cannot start — its trainer command exits at once
// (/bin/false) — waits longer before each new contention: the count of
// failed terms outlives the term core of one contention (the agent makes
// a core per contention and carries StepDown.FailedInARow into the next),
// and the node waits the StepDown's wait before it takes the lease again.
// Before, it took the lease again every second, forever.
func TestFailingTermsBackOff(t *testing.T) {
	cfg := agentRunConfig(t, 3)
	cfg.Trainer.Backend = config.BackendExec
	cfg.Trainer.Exec = []string{"/bin/false"}
	cfg.Trainer.ExecRestarts = 0 // the term fails at the first exit
	var ev, evj syncbuf.Buffer
	a := testAgent(t, externalBus(t), Config{Name: "n1", Roles: []string{placement.Trainer, placement.Engine, placement.Rollout},
		Run: cfg, Events: &ev, EventsJSON: &evj})
	defer a.Stop()
	clustertest.WaitFor(t, 2*time.Minute, "a third failed term in a row", func() bool {
		return strings.Contains(ev.String(), "3 failed term(s) in a row")
	})
	recs := readEventRecords(t, []byte(evj.String()))
	var resigned []EventRecord
	for _, r := range recs {
		if r.Kind == term.Resigned.String() {
			resigned = append(resigned, r)
		}
	}
	acquired := ofKind(recs, term.LeaseAcquired)
	if len(resigned) < 3 || len(acquired) < 3 {
		t.Fatalf("%d resignations, %d acquisitions; want 3 of each:\n%s", len(resigned), len(acquired), ev.String())
	}
	for i, want := range []struct {
		count int
		wait  time.Duration
	}{{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}} {
		r := resigned[i]
		if r.Reason != string(term.ReasonFailed) || r.Count != want.count || r.WaitS != want.wait.Seconds() {
			t.Errorf("resignation %d: reason %q count %d wait %gs; want failed, %d, %s (%s)", i+1, r.Reason, r.Count, r.WaitS, want.count, want.wait, r.Line)
		}
		if i+1 < len(acquired) {
			if gap := acquired[i+1].Time.Sub(r.Time); gap < want.wait {
				t.Errorf("took the lease again %s after resignation %d; want at least its wait %s", gap, i+1, want.wait)
			}
		}
	}
	if !strings.Contains(resigned[0].Line, "contending again in 1s") {
		t.Errorf("the resignation's line does not say the wait: %q", resigned[0].Line)
	}
}

// A trainer node whose trainer.exec command is not on its host refuses to
// start, naming the command: it would otherwise learn it only when it
// won the lease, and fail every term it took.
func TestTrainerExecMissingRefusedAtStart(t *testing.T) {
	cfg := agentRunConfig(t, 3)
	cfg.Trainer.Backend = config.BackendExec
	cfg.Trainer.Exec = []string{"/nonexistent/asyncrl-trainer"}
	_, err := Start(context.Background(), Config{Name: "n1", Roles: []string{placement.Trainer}, Run: cfg})
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), `trainer.exec "/nonexistent/asyncrl-trainer"`) {
		t.Fatalf("err = %v; want ErrConfig naming trainer.exec", err)
	}
	// A node without the trainer role does not run it: no check.
	a := testAgent(t, externalBus(t), Config{Name: "n2", Roles: []string{placement.Engine}, Run: cfg})
	a.Stop()
}
