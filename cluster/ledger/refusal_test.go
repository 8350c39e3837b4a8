package ledger_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/cluster/ledger"
	"github.com/asyncrl/asyncrl/messages"
)

// Issue 37: a trained mark must not be refused because a lagging replica
// answered the read — with replicas, any server answers a KV read, and
// one that has not applied the consumed transition yet reads the prompt
// as never recorded ("trained before it was consumed"). Record asks the
// stream's leader before it refuses; a prompt the leader has not either
// is refused as before.
func TestRecordAsksTheLeaderBeforeRefusingAnAbsentEntry(t *testing.T) {
	b := connect(t, t.TempDir())
	defer b.Close()
	l := open(t, b)
	mustRecord(t, l, rec("p1", messages.LedgerConsumed, 0))
	ledger.LagReads(l, 1)
	if _, out, err := l.Record(context.Background(), rec("p1", messages.LedgerTrained, 0)); err != nil || out != ledger.Applied {
		t.Fatalf("trained mark after a lagging read: %v %v; want applied", out, err)
	}
	if e, _, _ := l.Get(context.Background(), "p1"); e.State != messages.LedgerTrained {
		t.Fatalf("p1 is %s, want trained", e.State)
	}
	ledger.LagReads(l, 1)
	_, _, err := l.Record(context.Background(), rec("p2", messages.LedgerTrained, 0))
	if !errors.Is(err, ledger.ErrNotInFlight) {
		t.Fatalf("a prompt never consumed: %v; want ErrNotInFlight", err)
	}
}

// A refused transition is kept in the run's durable state, once per
// (prompt, state, attempt) however often its writer retried it, so the
// run's summary counts it whichever node was refused.
func TestRefusalsAreKept(t *testing.T) {
	b := connect(t, t.TempDir())
	defer b.Close()
	l := open(t, b)
	ctx := context.Background()
	if rs, err := l.Refusals(ctx); err != nil || len(rs) != 0 {
		t.Fatalf("refusals of a new ledger: %v %v", rs, err)
	}
	ev := rec("t1/p9", messages.LedgerTrained, 2)
	_, _, refused := l.Record(ctx, ev)
	if !errors.Is(refused, ledger.ErrIllegalTransition) {
		t.Fatalf("train of a prompt never consumed: %v", refused)
	}
	now := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	for range 3 { // a writer retrying the same mark
		if err := l.RecordRefusal(ctx, ledger.RefusalOf(ev, "n1", refused, now)); err != nil {
			t.Fatal(err)
		}
	}
	other := rec("t1/p3", messages.LedgerRequeued, 0)
	if err := l.RecordRefusal(ctx, ledger.RefusalOf(other, "n2", errors.New("requeued before it was consumed"), now)); err != nil {
		t.Fatal(err)
	}
	rs, err := l.Refusals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].PromptID != "t1/p3" || rs[1].PromptID != "t1/p9" || rs[1].Node != "n1" || rs[1].State != messages.LedgerTrained ||
		rs[1].Attempt != 2 || rs[1].Err != refused.Error() {
		t.Fatalf("refusals %+v", rs)
	}
	// The progress lives in the same bucket and is untouched.
	if _, ok, err := l.Progress(ctx); err != nil || ok {
		t.Fatalf("progress after refusals: %v %v", ok, err)
	}
}
