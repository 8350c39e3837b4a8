package sim

import (
	"slices"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
)

// planEntry finds the entry of the run's plan a subject or subscription
// pattern is: equal to the entry's name, or — for the per-engine and
// per-node entries, whose names PlanEntries("*", "*") spells with '*' —
// matched by it (an exact name first: turns.results is not turns.<id>). A
// pattern entry (groups.>) matches only itself: a subject
// under it the plan does not name (the old groups.settled) is not in the
// plan.
func planEntry(entries []transport.PlanEntry, s string) (transport.PlanEntry, bool) {
	for _, e := range entries {
		if e.Name == s {
			return e, true
		}
	}
	for _, e := range entries {
		if e.Kind != "pattern" && !strings.ContainsAny(s, "*>") && transport.SubjectMatches(e.Name, s) {
			return e, true
		}
	}
	return transport.PlanEntry{}, false
}

// TestSimSubjectsAreThePlan: every subject the simulator publishes on and
// every subscription it opens is one of the run's plan (transport.Plan,
// the one a node's run uses), and each message travels on the entry that
// lists its kind; so do the subjects the simulator hands the controller
// and sampling cores. A simulator that drifts from the system's subjects
// again (groups.settled for ledger.groups, weights.<engine> for the
// engines' control subject) fails here.
func TestSimSubjectsAreThePlan(t *testing.T) {
	entries := plan.PlanEntries("*", "*")
	type use struct{ subject, kind string }
	published := map[use]bool{}
	var subscribed []string
	for _, sc := range []Scenario{ScenarioDefault, ScenarioMixed} {
		for seed := int64(1); seed <= 2; seed++ {
			w, err := newWorld(Config{Seed: seed, Scenario: sc}.withDefaults())
			if err != nil {
				t.Fatal(err)
			}
			spy := w.hub.Connect("spy")
			if _, err := spy.Subscribe(">", func(m *transport.Msg) {
				k := "undecodable"
				if msg, err := messages.Decode(m.Data); err == nil {
					k = msg.Kind().String()
				}
				published[use{m.Subject, k}] = true
			}); err != nil {
				t.Fatal(err)
			}
			w.run()
			for _, s := range w.hub.Subscriptions() {
				if s != ">" {
					subscribed = append(subscribed, s)
				}
			}
		}
	}
	if len(published) < 10 {
		t.Fatalf("the spy saw %d (subject, kind) pairs: %v", len(published), published)
	}
	for u := range published {
		e, ok := planEntry(entries, u.subject)
		switch {
		case !ok:
			t.Errorf("the simulator publishes %s on %s, a subject the run's plan does not name", u.kind, u.subject)
		case !slices.Contains(strings.Split(e.Messages, ", "), u.kind):
			t.Errorf("the simulator publishes %s on %s, where the plan carries %q", u.kind, u.subject, e.Messages)
		}
	}
	for _, s := range subscribed {
		if _, ok := planEntry(entries, s); !ok {
			t.Errorf("the simulator subscribes to %s, which the run's plan does not name", s)
		}
	}
	// The subjects the cores address; the sim routes their sends by type,
	// so only this check sees them.
	c := &ctlNode{w: &world{in: inputs{capacity: true}}}
	cs := c.subjects()
	for _, u := range []use{{cs.Prompts, "PromptAssigned"}, {cs.Train, "TrainBatch"}, {cs.Capacity, "CapacityChanged"},
		{cs.Ledger, "PromptLedger"}, {cs.Settled, "SamplingExhausted"}, {cs.Settled, "GroupRequeued"},
		{subjKept, "GroupReady"}, {subjFiltered, "GroupFiltered"}} {
		e, ok := planEntry(entries, u.subject)
		if !ok || !slices.Contains(strings.Split(e.Messages, ", "), u.kind) {
			t.Errorf("the simulator's cores send %s on %q; the plan carries it on another subject", u.kind, u.subject)
		}
	}
}
