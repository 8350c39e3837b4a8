package chaos

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/cluster/node"
	"github.com/asyncrl/asyncrl/internal/report"
)

// clean is evidence of a healthy session: 3 groups (one trained, one
// filtered, one requeued and then trained again as attempt 2) and one in
// flight.
func clean() Evidence {
	return Evidence{
		Summary: report.Summary{Steps: 2, TrajectoriesStarted: 40, TrajectoriesFinished: 36, TrajectoriesAborted: 4,
			StalenessMax: 1, StalenessBound: 2, GroupsInFlightAtStop: 1, GroupsTrained: 2},
		Groups: []node.GroupRecord{
			{GroupID: "g1", PromptID: "p1", Consumed: true, Accepted: true, Staleness: 1, Trained: 1},
			{GroupID: "g2", PromptID: "p2", Consumed: true, FilteredFinal: 1},
			{GroupID: "g3", PromptID: "p3", Consumed: true, Requeued: 1},
			{GroupID: "g3b", PromptID: "p3", Attempt: 2, Consumed: true, Accepted: true, Trained: 1},
			{GroupID: "g4", PromptID: "p4", Consumed: true},
		},
		Samples: 10, StepsAtHeal: 1, StepsAtEnd: 2, Latest: 2, EngineVersions: []int64{2, 2, 2},
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		edit   func(*Evidence)
		broken string // the only invariant that must fail; "" = none
		detail string
	}{
		{"clean", func(*Evidence) {}, "", ""},
		{"lost trajectories", func(e *Evidence) { e.Summary.TrajectoriesLost = 3 }, InvNothingLost, "trajectories_lost 3"},
		{"unaccounted trajectory", func(e *Evidence) { e.Summary.TrajectoriesStarted = 41 }, InvNothingLost, "started 41"},
		{"trained and requeued", func(e *Evidence) { e.Groups[0].Requeued = 1 }, InvExactlyOnce, "g1: trained 1 filtered 0 requeued 1"},
		{"group without a fate", func(e *Evidence) { e.Summary.GroupsInFlightAtStop = 0 }, InvExactlyOnce, "1 consumed groups without a final state"},
		{"prompt trained twice", func(e *Evidence) {
			e.Groups[1] = node.GroupRecord{GroupID: "g2", PromptID: "p1", Consumed: true, Trained: 1}
		},
			InvNoDoubleTrain, "prompt p1 trained 2 times"},
		{"stale group", func(e *Evidence) { e.Groups[0].Staleness = 3 }, InvStaleness, "g1 trained with staleness 3 > 2"},
		{"stale max", func(e *Evidence) { e.Summary.StalenessMax = 5 }, InvStaleness, "staleness_max 5 > bound 2"},
		{"version drop", func(e *Evidence) { e.VersionDrops = []string{"engine 1: served v5, now v0"} }, InvVersionsGrow, "v5, now v0"},
		{"overclaim", func(e *Evidence) { e.Overclaims = []string{"engine 0: router v3, engine v2"} }, InvNoOverclaim, "router v3"},
		{"no progress", func(e *Evidence) { e.StepsAtEnd = 1 }, InvProgress, "steps 1 at heal, 1 at stop"},
		{"engine behind", func(e *Evidence) { e.EngineVersions[2] = -1 }, InvConverged, "engine 2 serves v-1, latest v2"},
		{"load error", func(e *Evidence) { e.LoadErrors = []string{"version 3: bad file"} }, InvWeightLoads, "bad file"},
		{"ledgers differ", func(e *Evidence) { e.LedgerMismatches = []string{"g1: durable trained 1, live trained 0"} }, InvDurable, "g1: durable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := clean()
			tc.edit(&ev)
			invs := Check(ev)
			if len(invs) != 10 {
				t.Fatalf("%d invariants", len(invs))
			}
			for _, inv := range invs {
				if want := inv.Name != tc.broken; inv.Held != want {
					t.Errorf("%s: held %v, want %v (%s)", inv.Name, inv.Held, want, inv.Detail)
				}
				if inv.Name == tc.broken && !strings.Contains(inv.Detail, tc.detail) {
					t.Errorf("%s: detail %q lacks %q", inv.Name, inv.Detail, tc.detail)
				}
			}
		})
	}
}

func TestReportTable(t *testing.T) {
	ev := clean()
	ev.Overclaims = []string{"a", "b", "c", "d", "e"}
	played := []Fault{{Kind: KindReset, Hold: 500e6}, {Kind: KindReset, Hold: 250e6}, {Kind: KindEngineKill, Hold: 1e9}}
	r := Report{Seed: 9, Duration: 5e9, Faults: countFaults(DefaultKinds(), played), Invariants: Check(ev), Summary: ev.Summary}
	if r.OK() || r.Total() != 3 || len(r.Violations()) != 1 {
		t.Fatalf("ok %v total %d violations %v", r.OK(), r.Total(), r.Violations())
	}
	var b strings.Builder
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"engine-kill  1         1.0s", "reset        2         0.8s", "latency      0", "total        3",
		"router never ahead of engine   NO    a; b; c; … 2 more", "nothing lost                   yes",
		"reproduce with: asyncrl chaos --seed 9 --duration 5s"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"seed":9`, `"kind":"reset","count":2,"hold_ns":750000000`, `"name":"router never ahead of engine","held":false`} {
		if !strings.Contains(string(js), want) {
			t.Errorf("JSON lacks %s: %s", want, js)
		}
	}
	if (Report{}).OK() {
		t.Error("a report without verdicts must not be OK")
	}
}

func TestCompareLedgers(t *testing.T) {
	durable := []node.GroupRecord{{GroupID: "a", Consumed: true, Trained: 1}, {GroupID: "b", Consumed: true, Requeued: 1}}
	if d := compareLedgers(durable, durable); len(d) != 0 {
		t.Fatalf("identical views differ: %v", d)
	}
	live := []node.GroupRecord{{GroupID: "a", Consumed: true, Trained: 1}, {GroupID: "b", Consumed: true}, {GroupID: "c", FilteredFinal: 1}}
	d := compareLedgers(durable, live)
	if len(d) != 2 || !strings.Contains(d[0], "c: ended on the bus") || !strings.Contains(d[1], "b: durable consumed=true trained 0 filtered 0 requeued 1") {
		t.Fatalf("differences %q", d)
	}
}
