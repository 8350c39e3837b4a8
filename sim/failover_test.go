package sim

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestFailoverTakesOver: over a batch of failover seeds every run makes
// its steps durable with every invariant held, and the batch exercises
// what the scenario is for: a standby claiming from a killed holder and
// requeuing what it had in flight, a deposed holder's save refused by the
// fence, a rollout node's groups requeued after it died, the lease
// core's verdicts on refused calls, and the rank hosts' verdicts.
func TestFailoverTakesOver(t *testing.T) {
	seen := map[string]int{}
	marks := map[string]func(string) bool{
		"takeover":    func(l string) bool { return strings.Contains(l, "claimed token") && !strings.Contains(l, `holder ""`) },
		"requeued":    func(l string) bool { return strings.Contains(l, "requeued (terms before token ") },
		"fenced":      func(l string) bool { return strings.Contains(l, "refused (claimed by token") },
		"dead-groups": func(l string) bool { return strings.Contains(l, "requeued (dead node ") },
		// The lease core's judgments under lost and late calls (issue 31):
		// a renewal refused because its own timed-out renewal landed, a
		// Create refused because its own timed-out Create landed (taken
		// up, not left to expire), a renewal refused for good.
		"renewal-landed": func(l string) bool { return strings.Contains(l, "refused: landed") },
		"create-landed":  func(l string) bool { return strings.Contains(l, "Create landed after its call timed out") },
		"renewal-lost":   func(l string) bool { return strings.Contains(l, "refused: lost") },
		// The rank hosts' rule (cluster/rankhost/fence) on the holders'
		// remote ranks: a deposed term's request refused, its ranks ended
		// by a newer term's request or the new holder's own term, a
		// departed holder's ranks ended, a group ended by its holder.
		"rank-refused": func(l string) bool { return strings.Contains(l, "rank host refuses") },
		"rank-term-ended": func(l string) bool {
			return strings.Contains(l, "rank host kills") && strings.Contains(l, "token") && strings.Contains(l, "arrived")
		},
		"rank-own-term": func(l string) bool {
			return strings.Contains(l, "rank host kills") && strings.Contains(l, "its own term")
		},
		"rank-departed":    func(l string) bool { return strings.Contains(l, "its holder left the membership") },
		"rank-holder-kill": func(l string) bool { return strings.Contains(l, "ended by its holder") },
		// The terms' publishers (the tracker core): a version every
		// engine left while it was on its way settles with no engine, and
		// the publish returns once an engine that came back serves it
		// (weightsync's WaitServed), not before.
		"publish-no-engine": func(l string) bool { return strings.Contains(l, "after no engine could reach it") },
	}
	// 100 seeds: a renewal refused for good is rare (seed 65 is the
	// first since the terms' trainers step the production step rule).
	for seed := int64(1); seed <= 100; seed++ {
		res, err := Run(Config{Seed: seed, Scenario: ScenarioFailover, Steps: 8, KeepLog: true})
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if res.StepsTrained != 8 || res.Trained < 8*2 {
			t.Fatalf("seed %d: %d steps durable, %d prompts trained", seed, res.StepsTrained, res.Trained)
		}
		for _, l := range res.Log {
			for k, m := range marks {
				if m(l) {
					seen[k]++
				}
			}
		}
	}
	for k := range marks {
		if seen[k] == 0 {
			t.Errorf("no seed showed %s: %v", k, seen)
		}
	}
	t.Logf("100 seeds: %v", seen)
}

// Issue 37, the lost prompt: n3 (rollouts, and one of three NATS
// servers) was SIGKILLed; the holder's trained mark of a later step was
// refused ("trained before it was consumed") and the prompt ended neither
// trained nor in flight. The sequence, as the failover scenario models
// it: the killed node's server led the durable ledger's stream, whose
// election holds every write for seconds while followers still answer
// reads; the term's ledger mirror had reported a group's consumed event
// to the core and was waiting to write it; the core saved the step that
// trained the group (the progress lives in another stream) and marked
// its prompts; the mark read the entry as absent and was refused.
// Seed 340 shows it on the core before the fix (planted: a step saved on
// the consumed event alone), minimised to that one kill; the fixed core
// saves the step only once the ledger recorded the consumed transition.
func TestLedgerElectionLostPrompt(t *testing.T) {
	const seed = 340 // 32 before the failover scenario stepped the real lease core (issue 31)
	bug := []Bug{BugTermSavesBeforeRecorded}
	_, err := Run(Config{Seed: seed, Scenario: ScenarioFailover, Steps: 8, Bugs: bug, Minimize: true})
	var v *Violation
	if !errors.As(err, &v) || v.Invariant != InvLedger || !strings.Contains(v.Detail, "trained before it was consumed") {
		t.Fatalf("seed %d on the old core: %v; want %s, a trained mark refused as before its consume", seed, err, InvLedger)
	}
	if len(v.Faults) != 1 || !strings.Contains(v.Faults[0], "rollout-node-kill") || !strings.Contains(v.Faults[0], "led the ledger") {
		t.Fatalf("minimal schedule %v; want the one rollout node kill whose server led the ledger", v.Faults)
	}
	res, err := Run(Config{Seed: seed, Scenario: ScenarioFailover, Steps: 8, KeepLog: true})
	if err != nil {
		t.Fatalf("seed %d on the fixed core: %v", seed, err)
	}
	elected, ok := firstLine(res.Log, "ledger: stream leader elected")
	if !ok {
		t.Fatal("no election in the log")
	}
	first, ok := firstLine(res.Log, "store: step 1 version 1 durable")
	if !ok || logTime(t, first) < logTime(t, elected) {
		t.Fatalf("step 1 durable at %q, the election over at %q: the step must wait for its prompts' consumed transitions", first, elected)
	}
	if res.StepsTrained != 8 {
		t.Fatalf("%d steps durable, want 8", res.StepsTrained)
	}
	t.Logf("old core: %s", v.Detail)
}

// Issue 37, marks lost with a holder: the durable progress names only its
// last step's prompts (a claim marks them again), so a holder that saved
// step s+1 while step s's marks were still being written — held up by a
// ledger election — and then died left step s's prompts unmarked; the
// claim's requeue took them for prompts in flight. Seed 47 at 10 steps
// shows it on the old core (planted), minimised to the election and the
// holder's kill. Since the terms' publishes wait for an engine's ack (as
// cluster/weightsync's do), a step is announced one ack later, so the
// next save races the marks less often: no seed up to 300 at 8 steps
// (the first is 508); before, seed 291 at 8 steps did (a zombie holder,
// then killed, under lossy messages), before the terms' trainers stepped
// the production step rule seed 58, and before the scenario stepped the
// real lease core seed 28 with a checkpoint-lost fault killing the
// holder — the soak's "marks" moment. The fixed core saves no step while
// an earlier one's marks are outstanding.
func TestMarksBeforeNextSave(t *testing.T) {
	const seed, steps = 47, 10
	_, err := Run(Config{Seed: seed, Scenario: ScenarioFailover, Steps: steps, Bugs: []Bug{BugTermMarksUnordered}, Minimize: true})
	var v *Violation
	if !errors.As(err, &v) || v.Invariant != InvLedger || !strings.Contains(v.Detail, "was never marked trained") {
		t.Fatalf("seed %d on the old core: %v; want %s, a durable step's prompt never marked", seed, err, InvLedger)
	}
	if s := strings.Join(v.Faults, "\n"); !strings.Contains(s, "ledger-election") {
		t.Fatalf("minimal schedule %v; want the ledger election that held the marks", v.Faults)
	}
	if _, err := Run(Config{Seed: seed, Scenario: ScenarioFailover, Steps: steps}); err != nil {
		t.Fatalf("seed %d on the fixed core: %v", seed, err)
	}
	t.Logf("old core: %s (faults %v)", v.Detail, v.Faults)
}

// Issue 37, a stalled start: a term whose start hangs (no router, its
// engines never load version 0 — the n1 logged its resume and
// then nothing for 180 s) sat on the lease; the core before the fix
// (planted: no start bound) leaves it there until StallAfter, and seed 22
// breaks progress, minimised to the start stall alone (seed 14 did, with
// the holder kill that made a new term start during it, before the
// scenario stepped the real lease core). The fixed core's watch steps the term
// down StartAfter after its claim, saying how far it got, and the next
// term trains.
func TestStalledStartStepsDown(t *testing.T) {
	const seed = 22
	_, err := Run(Config{Seed: seed, Scenario: ScenarioFailover, Steps: 8, Bugs: []Bug{BugTermNoStartBound}, Minimize: true})
	var v *Violation
	if !errors.As(err, &v) || v.Invariant != InvProgress {
		t.Fatalf("seed %d on the old core: %v; want %s", seed, err, InvProgress)
	}
	if s := strings.Join(v.Faults, "\n"); !strings.Contains(s, "start-stall") {
		t.Fatalf("minimal schedule %v; want the start stall", v.Faults)
	}
	res, err := Run(Config{Seed: seed, Scenario: ScenarioFailover, Steps: 8, KeepLog: true})
	if err != nil {
		t.Fatalf("seed %d on the fixed core: %v", seed, err)
	}
	hang, ok := firstLine(res.Log, "the start of", "hangs")
	if !ok {
		t.Fatal("no hung start in the log")
	}
	down, ok := firstLine(res.Log, "training failed: term stalled (no_start)", "last phase")
	if !ok {
		t.Fatal("the hung term never stepped down for its start")
	}
	bound := Config{}.withDefaults().ProgressBound / 2
	if took := logTime(t, down) - logTime(t, hang); took < bound || took > bound+time.Second {
		t.Fatalf("stepped down %v after the hung start; want StartAfter (%v) after its claim", took, bound)
	}
	if res.StepsTrained != 8 {
		t.Fatalf("%d steps durable, want 8", res.StepsTrained)
	}
	t.Logf("%s\n%s", hang, down)
}

// TestProgressExcusesRetryWait: a publish's retry wait armed during a
// fault (a weight-bucket outage) may outlast ProgressBound after the
// fault healed — the step rule's backoff doubles to 32 s — and progress
// is owed only from its end. Seed 1042 at 10 steps failed `progress` on
// the oracle that did not excuse it (found by the Makefile's failover
// command); it passes, and fails again with the excuse taken away, so the
// excuse is what it hinges on.
func TestProgressExcusesRetryWait(t *testing.T) {
	for _, c := range []struct {
		seed  int64
		steps int
	}{{1042, 10}, {1975, 8}} {
		if _, err := Run(Config{Seed: c.seed, Scenario: ScenarioFailover, Steps: c.steps}); err != nil {
			t.Fatalf("seed %d, %d steps: %v", c.seed, c.steps, err)
		}
		_, err := Run(Config{Seed: c.seed, Scenario: ScenarioFailover, Steps: c.steps, noRetryExcuse: true})
		var v *Violation
		if !errors.As(err, &v) || v.Invariant != InvProgress {
			t.Fatalf("seed %d, %d steps without the retry excuse: %v; want a progress violation", c.seed, c.steps, err)
		}
	}
}
