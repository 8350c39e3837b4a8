package node

import (
	"strconv"
	"testing"

	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
)

// The groups local rollout actors published are remembered only until the
// ledger sees them settled, so the set is bounded by the groups in flight,
// not by the run's length; what is left is exactly what Stop must wait for.
func TestLedgerForgetsSettledLocalGroups(t *testing.T) {
	l := newLedger()
	l.keptSubject = "asyncrl.r.groups.kept"
	see := func(subject string, m messages.Message) {
		data, err := messages.Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		l.observe(&transport.Msg{Subject: subject, Data: data})
	}
	const groups = 1000
	for i := range groups {
		id := "g" + strconv.Itoa(i)
		l.published(id, true)
		switch i % 4 {
		case 0: // kept by the sampling actor
			see(l.keptSubject, messages.GroupReady{GroupID: id})
		case 1: // filtered
			see("asyncrl.r.groups.filtered", messages.GroupFiltered{GroupID: id})
		case 2: // aborted, then requeued by the controller
			see("asyncrl.r.trajectories.aborted", messages.EpisodeAborted{GroupID: id})
			see("asyncrl.r.ledger", messages.PromptLedger{GroupID: id, State: messages.LedgerRequeued})
		case 3: // the rollout's own GroupReady alone does not settle it
			see("asyncrl.r.trajectories", messages.GroupReady{GroupID: id})
			if i != groups-1 {
				see("asyncrl.r.ledger", messages.GroupAccepted{GroupID: id})
			}
		}
	}
	if got := l.unsettledLocal(); len(got) != 1 || got[0] != "g999" {
		t.Fatalf("unsettled %v, want [g999]", got)
	}
	if n := len(l.local); n != 1 {
		t.Fatalf("%d local entries kept after %d groups, want 1", n, groups)
	}
	// A fate seen before the report: nothing to wait for.
	see(l.keptSubject, messages.GroupReady{GroupID: "early"})
	l.published("early", true)
	if got := l.unsettledLocal(); len(got) != 1 {
		t.Fatalf("unsettled %v after a settled group's late report", got)
	}
}
