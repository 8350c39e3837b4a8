package ledger_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/cluster/ledger"
	"github.com/asyncrl/asyncrl/messages"
)

// The soak's two-02-seed3710: the run's summary listed the ledger right
// after its end sweep requeued the last prompt in flight, from a replica
// (the watcher's consumer may sit on any) that had not applied that
// requeue yet, and said "in_flight 1" of a ledger that held none. Entries
// asks the stream's leader for its last sequence first and reads a
// listing older than that again: what was acknowledged before the call
// is in it.
func TestEntriesReadsAgainAListingBehindTheLeader(t *testing.T) {
	b := connect(t, t.TempDir())
	defer b.Close()
	l := open(t, b)
	ctx := context.Background()
	mustRecord(t, l, rec("p1", messages.LedgerConsumed, 0))
	mustRecord(t, l, rec("p2", messages.LedgerConsumed, 0))
	mustRecord(t, l, rec("p2", messages.LedgerTrained, 0))
	if err := ledger.LagLists(l, 3); err != nil { // a replica that has p1 in flight
		t.Fatal(err)
	}
	mustRecord(t, l, rec("p1", messages.LedgerRequeued, 0)) // the sweep's requeue
	es, err := l.Entries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(statesOf(es), " "); got != "p1:requeued p2:trained" {
		t.Fatalf("listing after the requeue: %s; want p1:requeued p2:trained", got)
	}
	// The requeue in flight read from the stale listing is not requeued
	// again either: RequeueInFlight lists through Entries.
	if err := ledger.LagLists(l, 0); err != nil {
		t.Fatal(err)
	}
	mustRecord(t, l, rec("p3", messages.LedgerConsumed, 0))
	if err := ledger.LagLists(l, 2); err != nil { // p3 in flight there
		t.Fatal(err)
	}
	mustRecord(t, l, rec("p3", messages.LedgerFiltered, 0))
	rq, err := l.RequeueNode(ctx, "test", "n1")
	if err != nil || len(rq) != 0 {
		t.Fatalf("sweep after p3 was filtered: requeued %v (%v); want none", statesOf(rq), err)
	}
}

// A replica that stays behind is not waited for forever: Entries fails,
// naming the lag, and the caller retries.
func TestEntriesFailsOnAReplicaThatStaysBehind(t *testing.T) {
	defer ledger.SetListLag(200 * time.Millisecond)()
	b := connect(t, t.TempDir())
	defer b.Close()
	l := open(t, b)
	mustRecord(t, l, rec("p1", messages.LedgerConsumed, 0))
	if err := ledger.LagLists(l, 1_000_000); err != nil {
		t.Fatal(err)
	}
	mustRecord(t, l, rec("p1", messages.LedgerRequeued, 0))
	_, err := l.Entries(context.Background())
	if err == nil || !strings.Contains(err.Error(), "stayed behind the stream's leader") {
		t.Fatalf("Entries from a replica that never catches up: %v; want the lag named", err)
	}
}
