package node

import (
	"strconv"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/trainer"
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

// The ledger view keeps a settled group's record for RecordSteps steps
// after its last news, then drops it, so a days-long run does not grow it
// by a record per group; groups still in flight (and a local actor's
// published ones not yet settled) stay however old. KeepGroupRecords
// keeps everything (the chaos audit).
func TestLedgerPrunesSettledRecords(t *testing.T) {
	const steps, perStep = 3 * RecordSteps, 10
	for _, keepAll := range []bool{false, true} {
		l := newLedger()
		l.keepAll = keepAll
		see := func(subject string, m messages.Message) {
			data, err := messages.Encode(m)
			if err != nil {
				t.Fatal(err)
			}
			l.observe(&transport.Msg{Subject: subject, Data: data})
		}
		l.published("mine", true) // published here, never settled
		for s := 1; s <= steps; s++ {
			for i := range perStep {
				id := "g" + strconv.Itoa(s) + "-" + strconv.Itoa(i)
				see("asyncrl.r.ledger", messages.GroupAccepted{GroupID: id, Step: int64(s)})
				see("asyncrl.r.ledger", messages.PromptLedger{GroupID: id, State: messages.LedgerTrained})
			}
			// Reported by its rollout actor, not settled yet.
			see("asyncrl.r.trajectories", messages.GroupReady{GroupID: "open" + strconv.Itoa(s)})
			see("asyncrl.r.steps", messages.StepDone{Step: int64(s)})
		}
		ids := map[string]bool{}
		for _, g := range l.Snapshot() {
			ids[g.GroupID] = true
		}
		if keepAll {
			if want := steps*perStep + steps; len(ids) != want {
				t.Fatalf("kept %d records, want all %d", len(ids), want)
			}
			continue
		}
		if max := (RecordSteps+1)*perStep + steps; len(ids) > max {
			t.Fatalf("%d records after %d steps of %d groups, want at most %d", len(ids), steps, perStep, max)
		}
		if ids["g1-0"] {
			t.Error("a group trained at step 1 is still in the view at step", steps)
		}
		if !ids["g"+strconv.Itoa(steps)+"-0"] {
			t.Error("a group trained at the last step was dropped")
		}
		if !ids["open1"] {
			t.Error("a group in flight since step 1 was dropped")
		}
		if got := l.unsettledLocal(); len(got) != 1 || got[0] != "mine" {
			t.Errorf("unsettled local groups %v, want [mine]", got)
		}
		if len(l.order) != len(l.groups) {
			t.Errorf("order holds %d ids for %d records", len(l.order), len(l.groups))
		}
	}
}

// A node whose trainer runs elsewhere sees its steps as StepDone: each
// is logged once (a re-announced step is not), with the tokens counted
// when it arrived and the trainer's step and publish times; the ledger
// keeps only the newest trainer.RecordsKept, and a poller behind them is
// told where the kept ones start.
func TestLedgerRemoteStepsLoggedAndBounded(t *testing.T) {
	l := newLedger()
	var tokens int64
	l.tokens = func() int64 { return tokens }
	type logged struct {
		step, tokens int64
		train        time.Duration
	}
	var log []logged
	l.onStep = func(r trainer.StepRecord, tok int64, ok bool) {
		if !ok {
			t.Fatal("tokens unknown although counted")
		}
		log = append(log, logged{r.Step, tok, r.TrainTime})
	}
	total := trainer.RecordsKept + 10
	for s := 1; s <= total; s++ {
		tokens += 100
		data, err := messages.Encode(messages.StepDone{Step: int64(s), NewVersion: int64(s),
			Stats: map[string]float64{"train_seconds": 0.5, "publish_seconds": 0.25}})
		if err != nil {
			t.Fatal(err)
		}
		l.observe(&transport.Msg{Subject: "asyncrl.r.steps", Data: data})
		if s == 3 {
			l.observe(&transport.Msg{Subject: "asyncrl.r.steps", Data: data}) // re-announced
		}
	}
	if len(log) != total || log[2] != (logged{3, 300, 500 * time.Millisecond}) || log[total-1].step != int64(total) {
		t.Fatalf("logged %d steps (%v …); want each of %d once", len(log), log[:3], total)
	}
	if l.stepCount() != total || len(l.steps) != trainer.RecordsKept {
		t.Fatalf("count %d, kept %d", l.stepCount(), len(l.steps))
	}
	recs, next := l.stepRecords(0)
	if len(recs) != trainer.RecordsKept || next != total || recs[0].Step != 11 || recs[0].PublishTime != 250*time.Millisecond {
		t.Fatalf("stepRecords(0): %d records from step %d, next %d", len(recs), recs[0].Step, next)
	}
	if recs, next := l.stepRecords(total - 1); len(recs) != 1 || recs[0].Step != int64(total) || next != total {
		t.Fatalf("stepRecords(total-1) = %v, %d", recs, next)
	}
}

// The ledger learns which step the controller has marked trained from
// its trained marks (each carries the controller's step after it advanced
// past the step trained); Wait holds the run's end until the last step's
// marks are seen, so the ledger and the summary agree at stop.
func TestLedgerMarkedFollowsTrainedMarks(t *testing.T) {
	l := newLedger()
	see := func(m messages.PromptLedger) {
		data, err := messages.Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		l.observe(&transport.Msg{Subject: "asyncrl.r.ledger", Data: data})
	}
	see(messages.PromptLedger{GroupID: "g1", State: messages.LedgerConsumed, Step: 1})
	see(messages.PromptLedger{GroupID: "g2", State: messages.LedgerRequeued, Step: 3})
	if got := l.marked(); got != 0 {
		t.Fatalf("marked %d before any trained mark", got)
	}
	see(messages.PromptLedger{GroupID: "g1", State: messages.LedgerTrained, Step: 3})
	see(messages.PromptLedger{GroupID: "g0", State: messages.LedgerTrained, Step: 2}) // a late mark of step 1
	if got := l.marked(); got != 2 {
		t.Fatalf("marked %d after the marks of step 2, want 2", got)
	}
}
