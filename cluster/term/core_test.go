package term

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/cluster/termwatch"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func testConfig() Config {
	return Config{Node: "n1", Run: "run", Steps: 10, Checkpoints: true,
		Watch: termwatch.Config{StallAfter: time.Minute, UnhealthyAfter: 20 * time.Second}}
}

// harness steps a core at a clock the test moves and collects each Ready.
type harness struct {
	t   *testing.T
	c   *Core
	now time.Time
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, c: c, now: t0}
}

// in steps every input at the harness's clock and returns what the core
// wanted done, then advances.
func (h *harness) in(ins ...Input) Ready {
	var r Ready
	for _, in := range ins {
		h.c.Step(h.now, in)
		got := h.c.Ready()
		r.Effects = append(r.Effects, got.Effects...)
		r.Events = append(r.Events, got.Events...)
		h.c.Advance()
	}
	return r
}

// tick moves the clock by d and ticks.
func (h *harness) tick(d time.Duration) Ready {
	h.now = h.now.Add(d)
	h.c.Tick(h.now)
	r := h.c.Ready()
	h.c.Advance()
	return r
}

// want compares r's effects and events with the golden lines.
func (h *harness) want(what string, r Ready, lines ...string) {
	h.t.Helper()
	got := strings.TrimSuffix(r.String(), "\n")
	if w := strings.Join(lines, "\n"); got != w {
		h.t.Errorf("%s:\n got:\n%s\nwant:\n%s", what, got, w)
	}
}

func effectsOf[T Effect](r Ready) []T {
	var out []T
	for _, e := range r.Effects {
		if v, ok := e.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

func kinds(r Ready) []Kind {
	var out []Kind
	for _, e := range r.Events {
		out = append(out, e.Kind)
	}
	return out
}

var (
	prevPrompts = []PromptAttempt{{Prompt: "t4/p1", Group: "g1", Attempt: 0}, {Prompt: "t4/p2", Group: "g2", Attempt: 1}}
	// claimedAt3 is progress at step 3 written by n0 (token 4), claimed by token 5.
	prev3    = Progress{Step: 3, Version: 3, Checkpoint: "nats-os://ckpt/v3-t4", Token: 4, Holder: "n0", Prompts: prevPrompts}
	claimed3 = Progress{Step: 3, Version: 3, Checkpoint: "nats-os://ckpt/v3-t4", Token: 5, Holder: "n1", Prompts: prevPrompts}
)

// runningTerm returns a harness whose core holds token 5 and runs a term from
// step 3 (7 steps to go).
func runningTerm(t *testing.T, cfg Config) *harness {
	t.Helper()
	h := newHarness(t, cfg)
	h.in(LeaseChanged{Leader: true, Token: 5}, ProgressClaimed{Token: 5, Prev: prev3, Claimed: claimed3})
	if !h.c.Running() && h.c.t == nil {
		t.Fatalf("no term running: %s", h.c)
	}
	h.in(Marked{Token: 5, Step: 3}) // the claim's marks of the previous holder's step
	return h
}

// A standby that wins the lease claims the progress first; the claim
// completes the previous holder's last durable step, requeues the rest of
// what it held, drops its weight bucket and starts the term from the
// durable step and its checkpoint.
func TestTermSwitchStartsFromDurableStep(t *testing.T) {
	h := newHarness(t, testConfig())
	h.want("standby sees progress short of the end", h.in(ProgressObserved{Progress: prev3}))
	h.want("lease won", h.in(LeaseChanged{Leader: true, Token: 5}),
		"effect term.ClaimProgress {Token:5}",
		"event lease trainer acquired token 5")
	h.want("claimed", h.in(ProgressClaimed{Token: 5, Prev: prev3, Claimed: claimed3}),
		"effect term.MarkTrained {Step:3 Prompts:[{Prompt:t4/p1 Group:g1 Attempt:0} {Prompt:t4/p2 Group:g2 Attempt:1}]}",
		"effect term.RequeueStale {Token:5}",
		"effect term.DeleteTermBucket {Term:run-t4}",
		"effect term.StartPipeline {Term:run-t5 Token:5 From:{Step:3 Version:3 Checkpoint:nats-os://ckpt/v3-t4 Token:5 Holder:n1 Prompts:[{Prompt:t4/p1 Group:g1 Attempt:0} {Prompt:t4/p2 Group:g2 Attempt:1}]} Steps:7}",
		"event resume from step 3 version 3 (7 steps to go)")
	h.want("requeue answered", h.in(StaleRequeued{Token: 5, Count: 4}), "event requeued 4 prompts terms before token 5 had in flight")
	// The term's first step is the run's step 4, version 4, saved once
	// the claim's marks are written.
	r := h.in(Marked{Token: 5, Step: 3}, StepTrained{Token: 5, Step: 1, Version: 1, Groups: []string{"ga"}},
		PromptConsumed{Token: 5, Attempt: PromptAttempt{Prompt: "t5/pa", Group: "ga"}}, LedgerWrite{Token: 5, Consumed: "ga"},
		CheckpointSaved{Token: 5, Version: 1, Location: "nats-os://ckpt/v4-t5"})
	sp := effectsOf[SaveProgress](r)
	if len(sp) != 1 || sp[0].Progress.Step != 4 || sp[0].Progress.Version != 4 || sp[0].Progress.Token != 5 || sp[0].Progress.Checkpoint != "nats-os://ckpt/v4-t5" {
		t.Errorf("saves %+v; want step 4 version 4 token 5 with its checkpoint", sp)
	}
}

// n0 (token 4) saved step 3 and died; n2 won token 6, claimed, and died
// before its requeue, so the progress names n2 although n0's prompts are
// still in flight. The next claimer (token 7) still marks n0's durable
// step trained first, then requeues what every older term holds in
// flight — n0's and n2's alike — before its pipeline starts. With the
// planted bug it requeues only n2's (none), and n0's stay in flight.
func TestClaimAfterDeadClaimerRequeuesEveryOlderTerm(t *testing.T) {
	deadClaim := prev3
	deadClaim.Token, deadClaim.Holder = 6, "n2"
	claimed := prev3
	claimed.Token, claimed.Holder = 7, "n1"
	h := newHarness(t, testConfig())
	h.in(LeaseChanged{Leader: true, Token: 7})
	h.want("claimed after a dead claimer", h.in(ProgressClaimed{Token: 7, Prev: deadClaim, Claimed: claimed}),
		"effect term.MarkTrained {Step:3 Prompts:[{Prompt:t4/p1 Group:g1 Attempt:0} {Prompt:t4/p2 Group:g2 Attempt:1}]}",
		"effect term.RequeueStale {Token:7}",
		"effect term.DeleteTermBucket {Term:run-t6}",
		"effect term.StartPipeline {Term:run-t7 Token:7 From:{Step:3 Version:3 Checkpoint:nats-os://ckpt/v3-t4 Token:7 Holder:n1 Prompts:[{Prompt:t4/p1 Group:g1 Attempt:0} {Prompt:t4/p2 Group:g2 Attempt:1}]} Steps:7}",
		"event resume from step 3 version 3 (7 steps to go)")
	h.want("a late answer of an older term", h.in(StaleRequeued{Token: 6, Count: 2}),
		"event ignored: term.StaleRequeued of token 6 (holding token 7: true)")

	cfg := testConfig()
	cfg.Plant.RequeuePrevHolderOnly = true
	p := newHarness(t, cfg)
	p.in(LeaseChanged{Leader: true, Token: 7})
	r := p.in(ProgressClaimed{Token: 7, Prev: deadClaim, Claimed: claimed})
	if rq, rs := effectsOf[RequeueNode](r), effectsOf[RequeueStale](r); len(rq) != 1 || rq[0].Node != "n2" || len(rs) != 0 {
		t.Errorf("planted RequeuePrevHolderOnly: RequeueNode %v RequeueStale %v, want RequeueNode of n2 only", rq, rs)
	}
}

// PromptTokenOf reads back the token PromptID qualified an id with.
func TestPromptTokenOf(t *testing.T) {
	if tok, ok := PromptTokenOf(PromptID(42, "gsm8k/7")); !ok || tok != 42 {
		t.Errorf("PromptTokenOf(PromptID(42, gsm8k/7)) = %d %v", tok, ok)
	}
	for _, id := range []string{"gsm8k/7", "t/7", "tx/7", "t42", "", "t-1/7"} {
		if tok, ok := PromptTokenOf(id); ok {
			t.Errorf("PromptTokenOf(%q) = %d, want not a qualified id", id, tok)
		}
	}
}

// The first term of a run has no previous holder: nothing to mark,
// requeue or delete.
func TestFirstTermStartsFromZero(t *testing.T) {
	h := newHarness(t, testConfig())
	h.in(LeaseChanged{Leader: true, Token: 1})
	h.want("claimed", h.in(ProgressClaimed{Token: 1, Claimed: Progress{Token: 1, Holder: "n1"}}),
		"effect term.StartPipeline {Term:run-t1 Token:1 From:{Step:0 Version:0 Checkpoint: Token:1 Holder:n1 Prompts:[]} Steps:10}",
		"event resume from step 0 version 0 (10 steps to go)")
}

// Progress past version 0 that names no checkpoint fails the term (the
// policy must not restart from the seed's weights); a standby tries.
func TestMissingCheckpointFailsTheTerm(t *testing.T) {
	h := newHarness(t, testConfig())
	h.in(LeaseChanged{Leader: true, Token: 5})
	p := claimed3
	p.Checkpoint = ""
	r := h.in(ProgressClaimed{Token: 5, Claimed: p})
	if len(effectsOf[StartPipeline](r)) != 0 {
		t.Fatalf("started a term with no checkpoint to resume from:\n%s", r)
	}
	if sd := effectsOf[StepDown](r); len(sd) != 1 || sd[0].Reason != ReasonFailed {
		t.Errorf("step-downs %+v; want one, failed", sd)
	}
	// Without checkpoints (a remote trainer owns its weights) it starts.
	cfg := testConfig()
	cfg.Checkpoints = false
	h = newHarness(t, cfg)
	h.in(LeaseChanged{Leader: true, Token: 5})
	if r := h.in(ProgressClaimed{Token: 5, Claimed: p}); len(effectsOf[StartPipeline](r)) != 1 {
		t.Errorf("a remote-trainer term did not start:\n%s", r)
	}
}

// A step is saved once its prompts (from the consumed events) and its
// checkpoint are known, one save at a time, in order; its prompts are
// marked trained only after the save was acknowledged.
func TestTrainedOnlyAfterDurableSave(t *testing.T) {
	h := runningTerm(t, testConfig())
	r := h.in(StepTrained{Token: 5, Step: 1, Version: 1, Groups: []string{"g1", "g2"}, Reward: 0.5, Mismatch: 0.01},
		StepTrained{Token: 5, Step: 2, Version: 2, Groups: []string{"g3"}},
		PromptConsumed{Token: 5, Attempt: PromptAttempt{Prompt: "t5/p1", Group: "g1"}}, LedgerWrite{Token: 5, Consumed: "g1"})
	if len(r.Effects) != 0 {
		t.Fatalf("acted before g2's consumed event and the checkpoint:\n%s", r)
	}
	h.want("consumed, no checkpoint yet", h.in(PromptConsumed{Token: 5, Attempt: PromptAttempt{Prompt: "t5/p2", Group: "g2", Attempt: 2}}, LedgerWrite{Token: 5, Consumed: "g2"}))
	h.want("checkpoint of version 1", h.in(CheckpointSaved{Token: 5, Version: 1, Location: "L4"}),
		"effect term.Prune {Version:4 Token:5 Durable:nats-os://ckpt/v3-t4}",
		"effect term.SaveProgress {Progress:{Step:4 Version:4 Checkpoint:L4 Token:5 Holder:n1 Prompts:[{Prompt:t5/p1 Group:g1 Attempt:0} {Prompt:t5/p2 Group:g2 Attempt:2}]}}")
	// Step 2's prompts and checkpoint are there, but step 4's save is
	// outstanding: nothing more until it is acknowledged.
	r = h.in(PromptConsumed{Token: 5, Attempt: PromptAttempt{Prompt: "t5/p3", Group: "g3"}}, LedgerWrite{Token: 5, Consumed: "g3"}, CheckpointSaved{Token: 5, Version: 2, Location: "L5"})
	if n := len(effectsOf[SaveProgress](r)); n != 0 || len(effectsOf[MarkTrained](r)) != 0 {
		t.Fatalf("a second save or a mark while step 4's save is outstanding:\n%s", r)
	}
	h.want("an acknowledgement of another step", h.in(ProgressSaved{Token: 5, Step: 5}), "event ignored: ProgressSaved of step 5: not the outstanding save")
	h.want("step 4 durable", h.in(ProgressSaved{Token: 5, Step: 4}),
		"effect term.MarkTrained {Step:4 Prompts:[{Prompt:t5/p1 Group:g1 Attempt:0} {Prompt:t5/p2 Group:g2 Attempt:2}]}",
		"event step 4 version 4 reward 0.500 mismatch 0.0100 (same-version 0 over 0 tokens)")
	// Step 5 is saved once step 4's marks are written (issue 37: a
	// claim marks only the last durable step's prompts).
	h.want("marks of another step", h.in(Marked{Token: 5, Step: 5}), "event ignored: Marked of step 5: no marks outstanding for it")
	h.want("step 4 marked", h.in(Marked{Token: 5, Step: 4}),
		"effect term.SaveProgress {Progress:{Step:5 Version:5 Checkpoint:L5 Token:5 Holder:n1 Prompts:[{Prompt:t5/p3 Group:g3 Attempt:0}]}}")
	if p, _ := h.c.Durable(); p.Step != 4 || p.Checkpoint != "L4" {
		t.Errorf("durable %+v; want step 4 at L4", p)
	}
	// The next checkpoint prunes against the new durable one.
	if pr := effectsOf[Prune](h.in(CheckpointSaved{Token: 5, Version: 3, Location: "L6"})); len(pr) != 1 || pr[0].Durable != "L4" || pr[0].Version != 6 {
		t.Errorf("prune %+v; want version 6 keeping L4", pr)
	}
	// A repeated StepTrained (the shell re-reads its steps) is ignored.
	if r := h.in(StepTrained{Token: 5, Step: 2, Version: 2, Groups: []string{"g3"}}); !reflect.DeepEqual(kinds(r), []Kind{Ignored}) || len(r.Effects) != 0 {
		t.Errorf("a repeated step:\n%s", r)
	}
}

// Fencing: once the lease is lost, the term is forgotten. Its late inputs
// (a step the trainer finished, the acknowledgement of a save in flight)
// produce no SaveProgress and no MarkTrained; only the pipeline stops.
func TestDeposedHolderLateInputsDoNothing(t *testing.T) {
	h := runningTerm(t, testConfig())
	h.in(StepTrained{Token: 5, Step: 1, Version: 1, Groups: []string{"g1"}},
		PromptConsumed{Token: 5, Attempt: PromptAttempt{Prompt: "t5/p1", Group: "g1"}}, LedgerWrite{Token: 5, Consumed: "g1"},
		CheckpointSaved{Token: 5, Version: 1, Location: "L4"})
	h.want("lease lost", h.in(LeaseChanged{Leader: false}), "effect term.StopPipeline {Token:5}", "event lease trainer lost")
	r := h.in(ProgressSaved{Token: 5, Step: 4}, StepTrained{Token: 5, Step: 2, Version: 2, Groups: []string{"g1"}},
		CheckpointSaved{Token: 5, Version: 2, Location: "L5"}, RolloutStatus{Token: 5, Node: "n3", Groups: []GroupRef{{"g9", "p9"}}},
		EngineTarget{Token: 5, Engine: "n3-engine-0", Version: 2}, Failed{Token: 5, Err: "late"})
	if len(r.Effects) != 0 {
		t.Fatalf("a deposed holder acted:\n%s", r)
	}
	for _, e := range r.Events {
		if e.Kind != Ignored {
			t.Errorf("event %s; want only Ignored", e)
		}
	}
	h.want("ticks", h.tick(time.Hour))
	// A new term (a larger token) ignores the old term's inputs too.
	h.in(LeaseChanged{Leader: true, Token: 8}, ProgressClaimed{Token: 8, Prev: claimed3, Claimed: claimed3})
	if r := h.in(ProgressSaved{Token: 5, Step: 4}, StepTrained{Token: 5, Step: 1, Version: 1}); len(r.Effects) != 0 {
		t.Errorf("the old term's inputs acted in the new one:\n%s", r)
	}
}

// A save refused by the fence ends the term: no mark for the step, the
// pipeline stops and the lease is given up.
func TestFencedSaveStepsDown(t *testing.T) {
	h := runningTerm(t, testConfig())
	h.in(StepTrained{Token: 5, Step: 1, Version: 1, Groups: []string{"g1"}},
		PromptConsumed{Token: 5, Attempt: PromptAttempt{Prompt: "t5/p1", Group: "g1"}}, LedgerWrite{Token: 5, Consumed: "g1"},
		CheckpointSaved{Token: 5, Version: 1, Location: "L4"})
	h.want("fenced", h.in(SaveFailed{Token: 5, Step: 4, Fenced: true, Err: "lease: fenced off (stale token)"}),
		"effect term.StopPipeline {Token:5}",
		"effect term.StepDown {Reason:fenced}",
		"event training failed: save progress of step 4: lease: fenced off (stale token)",
		"event lease trainer resigned (fenced)")
	if _, holding := h.c.Holding(); holding {
		t.Error("still holding after the step-down")
	}
}

// A rollout node that leaves takes its groups with it: each is reported
// aborted once, and only for nodes the holder saw as members.
func TestDeadNodeGroupsRequeuedOnce(t *testing.T) {
	h := newHarness(t, testConfig())
	h.in(MembersChanged{Members: []Member{{Name: "n1"}, {Name: "n2"}, {Name: "n3"}}})
	h = func() *harness { // start the term with those members
		h.in(LeaseChanged{Leader: true, Token: 5}, ProgressClaimed{Token: 5, Prev: prev3, Claimed: claimed3})
		return h
	}()
	h.in(RolloutStatus{Token: 5, Node: "n2", Groups: []GroupRef{{"g1", "p1"}, {"g2", "p2"}}},
		RolloutStatus{Token: 5, Node: "n4", Groups: []GroupRef{{"g4", "p4"}}}, // joined through another member
		RolloutStatus{Token: 5, Node: "n1", Groups: []GroupRef{{"g0", "p0"}}}) // this node's own
	h.want("n2 and n3 leave", h.in(MembersChanged{Members: []Member{{Name: "n1"}}}),
		"effect term.AbortGroups {Node:n2 Groups:[{Group:g1 Prompt:p1} {Group:g2 Prompt:p2}]}",
		"event requeued 2 groups n2 had in flight")
	h.want("again", h.in(MembersChanged{Members: []Member{{Name: "n1"}}}))
	// n2's last report lands after it left: only the group not yet aborted.
	h.want("late report", h.in(RolloutStatus{Token: 5, Node: "n2", Groups: []GroupRef{{"g2", "p2"}, {"g5", "p5"}}}),
		"effect term.AbortGroups {Node:n2 Groups:[{Group:g5 Prompt:p5}]}",
		"event requeued 1 groups n2 had in flight")
	// n4 is listed, then leaves: now its group goes.
	h.want("n4 listed", h.in(MembersChanged{Members: []Member{{Name: "n1"}, {Name: "n4"}}}))
	h.want("n4 leaves", h.in(MembersChanged{Members: []Member{{Name: "n1"}}}),
		"effect term.AbortGroups {Node:n4 Groups:[{Group:g4 Prompt:p4}]}",
		"event requeued 1 groups n4 had in flight")
}

// Engines of the members are registered when the term starts; a target
// is sent at once and again every ResendEvery until the engine serves it.
func TestLoadWeightsResentUntilAck(t *testing.T) {
	h := newHarness(t, testConfig())
	eng := func(node string, urls ...string) Member {
		m := Member{Name: node, Engines: map[string]string{}}
		for i, u := range urls {
			m.Engines[fmt.Sprintf("%s-engine-%d", node, i)] = u
		}
		return m
	}
	h.in(MembersChanged{Members: []Member{eng("n1"), eng("n2", "http://a", "http://b")}})
	h.in(LeaseChanged{Leader: true, Token: 5})
	r := h.in(ProgressClaimed{Token: 5, Claimed: Progress{Token: 5}})
	if ae := effectsOf[AddEngines](r); len(ae) != 1 || ae[0].Node != "n2" || len(ae[0].Engines) != 2 {
		t.Fatalf("engines added %+v; want n2's two", ae)
	}
	h.want("target", h.in(EngineTarget{Token: 5, Engine: "n2-engine-0", Version: 0}, EngineTarget{Token: 5, Engine: "n2-engine-1", Version: 0}),
		"effect term.SendLoadWeights {Node:n2 Engine:n2-engine-0 Version:0}",
		"effect term.SendLoadWeights {Node:n2 Engine:n2-engine-1 Version:0}")
	h.want("not a remote engine", h.in(EngineTarget{Token: 5, Engine: "local-0", Version: 0}),
		"event ignored: EngineTarget for local-0: not a remote engine of term run-t5")
	h.want("one second", h.tick(time.Second))
	h.in(EngineServing{Token: 5, Engine: "n2-engine-1", Version: 0})
	h.want("two seconds: only the engine that has not acked", h.tick(time.Second),
		"effect term.SendLoadWeights {Node:n2 Engine:n2-engine-0 Version:0}")
	h.in(EngineServing{Token: 5, Engine: "n2-engine-0", Version: 0})
	h.want("both acked", h.tick(2*time.Second))
	h.in(EngineTarget{Token: 5, Engine: "n2-engine-0", Version: 3}, EngineServing{Token: 5, Engine: "n2-engine-0", Version: 2})
	h.want("behind its new target", h.tick(2*time.Second), "effect term.SendLoadWeights {Node:n2 Engine:n2-engine-0 Version:3}")
	// n2 restarts with one engine at a new URL: the gone one leaves, the
	// other is replaced in place and holds nothing.
	h.want("restart", h.in(MembersChanged{Members: []Member{eng("n1"), eng("n2", "http://c")}}),
		"effect term.RemoveEngines {Node:n2 Names:[n2-engine-1]}",
		"effect term.AddEngines {Node:n2 Engines:map[n2-engine-0:http://c]}")
	h.want("the replaced engine has no target yet", h.tick(2*time.Second))
	h.want("n2 dies", h.in(MembersChanged{Members: []Member{eng("n1")}}), "effect term.RemoveEngines {Node:n2 Names:[n2-engine-0]}")
	if h.c.Remote("n2-engine-0") {
		t.Error("a dead node's engine is still remote")
	}
}

// The term is announced once its router listens, then every AnnounceEvery.
func TestAnnounce(t *testing.T) {
	h := runningTerm(t, testConfig())
	h.want("no router yet", h.tick(time.Second))
	h.want("router", h.in(RouterListening{Token: 5, URL: "http://r"}), "effect term.Announce {Term:run-t5 Token:5 Router:http://r}")
	h.want("half a second", h.tick(500*time.Millisecond))
	h.want("a second", h.tick(500*time.Millisecond), "effect term.Announce {Term:run-t5 Token:5 Router:http://r}")
}

// No step for StallAfter, or a dependency failing for UnhealthyAfter,
// ends the term: the watch's events, then the step-down.
func TestStepDownOnStallAndUnhealthy(t *testing.T) {
	h := runningTerm(t, testConfig())
	h.in(PipelineStarted{Token: 5})
	h.want("stall", h.tick(time.Minute),
		"effect term.StopPipeline {Token:5}",
		"effect term.StepDown {Reason:stalled}",
		"event term stalled: no step for 1m0s; stepping down",
		"event training failed: term stalled (no_step)",
		"event lease trainer resigned (stalled)")

	h = runningTerm(t, testConfig())
	h.want("failing", h.in(Probe{Token: 5, Dep: "groups-run-t5", Err: "stream not found", Moved: []string{""}}),
		"event term dependency groups-run-t5 failing: stream not found",
		"event leader of stream groups-run-t5 moved to n1")
	h.want("not yet", h.tick(19*time.Second))
	r := h.tick(time.Second)
	if sd := effectsOf[StepDown](r); len(sd) != 1 || sd[0].Reason != ReasonStalled {
		t.Errorf("after UnhealthyAfter:\n%s", r)
	}
	// Ledger writes count as a dependency too.
	h = runningTerm(t, testConfig())
	h.in(LedgerWrite{Token: 5, Err: "timeout"})
	if r := h.tick(20 * time.Second); len(effectsOf[StepDown](r)) != 1 {
		t.Errorf("failing ledger writes did not end the term:\n%s", r)
	}
}

// A holder that loses quorum stops and gives the lease up; a minority
// that wins the lease gives it up at once without claiming anything.
func TestQuorum(t *testing.T) {
	h := runningTerm(t, testConfig())
	h.want("quorum lost", h.in(QuorumChanged{Train: false}),
		"effect term.StopPipeline {Token:5}",
		"effect term.StepDown {Reason:quorum}",
		"event lost quorum: training stops",
		"event lease trainer resigned (quorum)")
	if h.c.Quorate() {
		t.Error("still quorate")
	}
	h.want("minority wins the lease", h.in(LeaseChanged{Leader: true, Token: 9}),
		"effect term.StepDown {Reason:quorum}",
		"event lease trainer resigned (quorum)")
}

// The last step's save completes the run: the pipeline stops, the ledger
// is finished and Done closes once. A standby sees it from the progress.
func TestRunComplete(t *testing.T) {
	cfg := testConfig()
	cfg.Steps = 4
	h := runningTerm(t, cfg) // from step 3: one to go
	h.in(StepTrained{Token: 5, Step: 1, Version: 1, Groups: []string{"g1"}},
		PromptConsumed{Token: 5, Attempt: PromptAttempt{Prompt: "t5/p1", Group: "g1"}}, LedgerWrite{Token: 5, Consumed: "g1"},
		CheckpointSaved{Token: 5, Version: 1, Location: "L4"})
	h.want("last step durable", h.in(ProgressSaved{Token: 5, Step: 4}),
		"effect term.MarkTrained {Step:4 Prompts:[{Prompt:t5/p1 Group:g1 Attempt:0}]}",
		"effect term.StopPipeline {Token:5}",
		"effect term.Finish {Token:5}",
		"effect term.Done {}",
		"event step 4 version 4 reward 0.000 mismatch 0.0000 (same-version 0 over 0 tokens)",
		"event run complete at step 4")
	h.want("its own progress", h.in(ProgressObserved{Progress: Progress{Step: 4, Holder: "n1"}}))

	s := newHarness(t, cfg)
	s.want("standby", s.in(ProgressObserved{Progress: Progress{Step: 4, Holder: "n0"}}, ProgressObserved{Progress: Progress{Step: 4, Holder: "n0"}}),
		"effect term.Done {}", "event run complete at step 4 (trained by n0)")
	// A holder that claims a complete run is done at once.
	s = newHarness(t, cfg)
	s.in(LeaseChanged{Leader: true, Token: 6})
	r := s.in(ProgressClaimed{Token: 6, Prev: Progress{Step: 4, Holder: "n0", Token: 5}, Claimed: Progress{Step: 4, Token: 6}})
	if len(effectsOf[StartPipeline](r)) != 0 || len(effectsOf[Done](r)) != 1 {
		t.Errorf("claiming a complete run:\n%s", r)
	}
}

// A clean stop saves the steps the stopped pipeline finished (the lease
// is still held), then gives the lease up.
func TestCleanStopSavesThenResigns(t *testing.T) {
	h := runningTerm(t, testConfig())
	h.in(StepTrained{Token: 5, Step: 1, Version: 1, Groups: []string{"g1"}},
		PromptConsumed{Token: 5, Attempt: PromptAttempt{Prompt: "t5/p1", Group: "g1"}}, LedgerWrite{Token: 5, Consumed: "g1"},
		CheckpointSaved{Token: 5, Version: 1, Location: "L4"},
		StepTrained{Token: 5, Step: 2, Version: 2, Groups: []string{"g2"}}) // g2's event never came
	h.want("stop", h.in(Stop{}), "effect term.StopPipeline {Token:5}")
	h.want("saved", h.in(ProgressSaved{Token: 5, Step: 4}),
		"effect term.MarkTrained {Step:4 Prompts:[{Prompt:t5/p1 Group:g1 Attempt:0}]}",
		"event step 4 version 4 reward 0.000 mismatch 0.0000 (same-version 0 over 0 tokens)")
	h.want("marked", h.in(Marked{Token: 5, Step: 4}),
		"effect term.StepDown {Reason:stopping}",
		"event lease trainer resigned (stopping)")
	// Nothing to save: resign at once.
	h = runningTerm(t, testConfig())
	h.want("stop idle", h.in(Stop{}), "effect term.StopPipeline {Token:5}", "effect term.StepDown {Reason:stopping}",
		"event lease trainer resigned (stopping)")
}

func TestConfigValidated(t *testing.T) {
	for _, mut := range []func(*Config){func(c *Config) { c.Node = "" }, func(c *Config) { c.Run = "" },
		func(c *Config) { c.Steps = 0 }, func(c *Config) { c.ResendEvery = -1 }, func(c *Config) { c.Watch.StallAfter = 0 }} {
		cfg := testConfig()
		mut(&cfg)
		if _, err := New(cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}

// Issue 37: a step's prompts are named in its durable progress (and so
// marked trained) only once the ledger recorded their consumed
// transitions. The mirror reports a consumed event before its durable
// write, which waits while the ledger's stream elects a leader; a step
// saved then had its trained marks refused ("trained before it was
// consumed") and the prompt ended neither trained nor in flight. A
// consumed write that failed for good ends the term.
func TestStepWaitsForDurableConsumed(t *testing.T) {
	h := runningTerm(t, testConfig())
	r := h.in(StepTrained{Token: 5, Step: 1, Version: 1, Groups: []string{"g1"}},
		PromptConsumed{Token: 5, Attempt: PromptAttempt{Prompt: "t5/p1", Group: "g1"}},
		CheckpointSaved{Token: 5, Version: 1, Location: "L4"})
	if n := len(effectsOf[SaveProgress](r)); n != 0 {
		t.Fatalf("saved a step whose prompt's consumed transition is not durable:\n%s", r)
	}
	h.want("another group recorded", h.in(LedgerWrite{Token: 5, Consumed: "g9"}))
	h.want("recorded", h.in(LedgerWrite{Token: 5, Consumed: "g1"}),
		"effect term.SaveProgress {Progress:{Step:4 Version:4 Checkpoint:L4 Token:5 Holder:n1 Prompts:[{Prompt:t5/p1 Group:g1 Attempt:0}]}}")

	// The pre-issue-37 core (planted) saves on the consumed event alone.
	cfg := testConfig()
	cfg.Plant.SaveBeforeRecorded = true
	h = runningTerm(t, cfg)
	r = h.in(StepTrained{Token: 5, Step: 1, Version: 1, Groups: []string{"g1"}},
		PromptConsumed{Token: 5, Attempt: PromptAttempt{Prompt: "t5/p1", Group: "g1"}},
		CheckpointSaved{Token: 5, Version: 1, Location: "L4"})
	if n := len(effectsOf[SaveProgress](r)); n != 1 {
		t.Fatalf("planted SaveBeforeRecorded: %d saves, want 1:\n%s", n, r)
	}

	h = runningTerm(t, testConfig())
	h.in(PromptConsumed{Token: 5, Attempt: PromptAttempt{Prompt: "t5/p1", Group: "g1"}})
	h.want("consumed write failed for good", h.in(LedgerWrite{Token: 5, Consumed: "g1", Err: "context deadline exceeded"}),
		"effect term.StopPipeline {Token:5}",
		"effect term.StepDown {Reason:failed}",
		"event term dependency durable ledger writes failing: context deadline exceeded",
		"event training failed: the durable ledger did not record group g1 consumed: context deadline exceeded",
		"event lease trainer resigned (failed)")
	// A refusal is an answer (no ill health for the watch), but the
	// group can never be trained: the term ends too.
	h = runningTerm(t, testConfig())
	r = h.in(LedgerWrite{Token: 5, Consumed: "g1", Err: "ledger: illegal transition", Refused: true})
	if sd := effectsOf[StepDown](r); len(sd) != 1 || slices.Contains(kinds(r), Watch) {
		t.Errorf("a refused consumed transition: want a step-down and no failing dependency:\n%s", r)
	}
}

// Issue 37: a durable step's trained marks are written before the next
// step is saved, so the durable progress (which names only its last
// step's prompts, marked again by the next claim) never hides an earlier
// step whose marks a killed holder lost. The claim's own marks of the
// previous holder's step come first too; marks that could not be written
// end the term.
func TestNextSaveWaitsForMarks(t *testing.T) {
	h := newHarness(t, testConfig())
	h.in(LeaseChanged{Leader: true, Token: 5}, ProgressClaimed{Token: 5, Prev: prev3, Claimed: claimed3})
	r := h.in(StepTrained{Token: 5, Step: 1, Version: 1, Groups: []string{"g1"}},
		PromptConsumed{Token: 5, Attempt: PromptAttempt{Prompt: "t5/p1", Group: "g1"}}, LedgerWrite{Token: 5, Consumed: "g1"},
		CheckpointSaved{Token: 5, Version: 1, Location: "L4"})
	if n := len(effectsOf[SaveProgress](r)); n != 0 {
		t.Fatalf("saved step 4 before the claim's marks of step 3 were written:\n%s", r)
	}
	if sp := effectsOf[SaveProgress](h.in(Marked{Token: 5, Step: 3})); len(sp) != 1 || sp[0].Progress.Step != 4 {
		t.Fatalf("step 4 not saved once step 3 was marked: %+v", sp)
	}
	h.in(ProgressSaved{Token: 5, Step: 4}, StepTrained{Token: 5, Step: 2, Version: 2, Groups: []string{"g2"}},
		PromptConsumed{Token: 5, Attempt: PromptAttempt{Prompt: "t5/p2", Group: "g2"}}, LedgerWrite{Token: 5, Consumed: "g2"})
	if r := h.in(CheckpointSaved{Token: 5, Version: 2, Location: "L5"}); len(effectsOf[SaveProgress](r)) != 0 {
		t.Fatalf("saved step 5 while step 4's marks are outstanding:\n%s", r)
	}
	h.want("marks failed", h.in(Marked{Token: 5, Step: 4, Err: "context deadline exceeded"}),
		"effect term.StopPipeline {Token:5}",
		"effect term.StepDown {Reason:failed}",
		"event training failed: trained marks of step 4 not written: context deadline exceeded",
		"event lease trainer resigned (failed)")

	// The pre-issue-37 core (planted) saves step 5 at once.
	cfg := testConfig()
	cfg.Plant.MarksUnordered = true
	h = runningTerm(t, cfg)
	h.in(StepTrained{Token: 5, Step: 1, Version: 1, Groups: []string{"g1"}}, StepTrained{Token: 5, Step: 2, Version: 2, Groups: []string{"g2"}},
		PromptConsumed{Token: 5, Attempt: PromptAttempt{Prompt: "t5/p1", Group: "g1"}}, LedgerWrite{Token: 5, Consumed: "g1"},
		PromptConsumed{Token: 5, Attempt: PromptAttempt{Prompt: "t5/p2", Group: "g2"}}, LedgerWrite{Token: 5, Consumed: "g2"},
		CheckpointSaved{Token: 5, Version: 1, Location: "L4"}, CheckpointSaved{Token: 5, Version: 2, Location: "L5"})
	if sp := effectsOf[SaveProgress](h.in(ProgressSaved{Token: 5, Step: 4})); len(sp) != 1 || sp[0].Progress.Step != 5 {
		t.Fatalf("planted MarksUnordered: saves %+v, want step 5 at once", sp)
	}
}

// Issue 37, a stalled start: a term that claimed the lease but whose
// pipeline never started — its engines never followed it, a stream it
// creates never answered — is noticed by its watch StartAfter after the
// claim and steps down, saying how far its start got; the lease goes to a
// standby (or this node again) for a clean term. One that started in time
// is judged by StallAfter only.
func TestStalledStartStepsDown(t *testing.T) {
	cfg := testConfig()
	cfg.Watch.StartAfter = 30 * time.Second
	h := newHarness(t, cfg)
	h.in(MembersChanged{Members: []Member{{Name: "n1"}, {Name: "n3", Engines: map[string]string{"n3-engine-0": "http://e"}}}})
	h.in(LeaseChanged{Leader: true, Token: 5}, ProgressClaimed{Token: 5, Prev: prev3, Claimed: claimed3}, Marked{Token: 5, Step: 3})
	h.in(StartPhase{Token: 5, Phase: "checkpoint restored"}, RouterListening{Token: 5, URL: "http://r"})
	h.tick(10 * time.Second)
	h.in(StartPhase{Token: 5, Phase: "waiting for an engine to load version 0"}, EngineTarget{Token: 5, Engine: "n3-engine-0", Version: 0})
	if r := h.tick(19 * time.Second); len(effectsOf[StepDown](r)) != 0 {
		t.Fatalf("stepped down before StartAfter:\n%s", r)
	}
	h.want("not started after 30s", h.tick(time.Second),
		"effect term.StopPipeline {Token:5}",
		"effect term.StepDown {Reason:stalled}",
		"event term stalled: not started 30s after its claim; stepping down",
		`event training failed: term stalled (no_start): not started: last phase "waiting for an engine to load version 0" 20s ago; router at http://r; engines: 1 registered, 1 sent LoadWeights, 0 serving`,
		"event lease trainer resigned (stalled)")

	h = newHarness(t, cfg)
	h.in(LeaseChanged{Leader: true, Token: 5}, ProgressClaimed{Token: 5, Prev: prev3, Claimed: claimed3}, Marked{Token: 5, Step: 3})
	h.tick(29 * time.Second)
	h.in(PipelineStarted{Token: 5})
	if r := h.tick(30 * time.Second); len(effectsOf[StepDown](r)) != 0 {
		t.Fatalf("a started term stepped down before StallAfter:\n%s", r)
	}
	if r := h.tick(time.Second); len(effectsOf[StepDown](r)) != 1 {
		t.Fatalf("a started term without a step: no step-down at StallAfter:\n%s", r)
	}
}
