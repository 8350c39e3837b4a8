package controller

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/staleness"
	"github.com/asyncrl/asyncrl/messages"
)

type seqSource struct{ n, limit int }

func (s *seqSource) Next() (Prompt, bool) {
	if s.limit > 0 && s.n >= s.limit {
		return Prompt{}, false
	}
	s.n++
	return Prompt{ID: fmt.Sprintf("p%d", s.n), Text: "t"}, true
}

func testConfig(b, w, s int64) Config {
	return Config{
		Staleness: staleness.Config{MaxStalenessSteps: s, NumParallelGenerationWorkers: w, MiniBatchSize: b, StalePolicy: staleness.PolicyRequeue},
		RunID:     "r", Sender: "ctl", Task: "reverse", NSamples: 2,
		Subjects: Subjects{Prompts: "P", Train: "T", Capacity: "C", Ledger: "L", Settled: "S"},
	}
}

var t0 = time.Unix(1000, 0)

// sent drains the core and groups its sends by subject.
func sent(c *Core) map[string][]messages.Message {
	out := map[string][]messages.Message{}
	for _, s := range c.Drain().Sends {
		out[s.Subject] = append(out[s.Subject], s.Msg)
	}
	return out
}

// groupReady builds a finished group with a real token batch: one
// trajectory per reward, every token from version oldest, loss mask 0 1 1.
func groupReady(t *testing.T, groupID, promptID string, oldest int64, rewards ...float64) messages.GroupReady {
	t.Helper()
	masks := make([][]uint8, len(rewards))
	for i := range masks {
		masks[i] = []uint8{0, 1, 1}
	}
	return groupReadyMasks(t, groupID, promptID, oldest, masks, rewards...)
}

// groupReadyMasks is groupReady with explicit per-trajectory loss masks.
func groupReadyMasks(t *testing.T, groupID, promptID string, oldest int64, masks [][]uint8, rewards ...float64) messages.GroupReady {
	t.Helper()
	tb, err := messages.NewTokenBatch(messages.BatchSpec{Vocab: 98})
	if err != nil {
		t.Fatal(err)
	}
	g := messages.GroupReady{GroupID: groupID, PromptID: promptID, OldestVersion: oldest, Rewards: rewards}
	for i, r := range rewards {
		id := fmt.Sprintf("%s/%d", groupID, i)
		if err := tb.Append(messages.Trajectory{ID: id, GroupID: groupID, Reward: float32(r), PromptLen: 1,
			TokenIDs: []int32{1, 5, 6}, Logprobs: []float32{0, -1, -2}, LossMask: masks[i],
			PolicyVersions: []int32{int32(oldest), int32(oldest), int32(oldest)}}); err != nil {
			t.Fatal(err)
		}
		g.TrajectoryIDs = append(g.TrajectoryIDs, id)
	}
	data, err := messages.EncodeTokenBatch(tb)
	if err != nil {
		t.Fatal(err)
	}
	g.Batch = messages.BatchRef{Inline: data}
	return g
}

func assigned(t *testing.T, msgs []messages.Message) []messages.PromptAssigned {
	t.Helper()
	var out []messages.PromptAssigned
	for _, m := range msgs {
		out = append(out, m.(messages.PromptAssigned))
	}
	return out
}

func ledgerStates(msgs []messages.Message) map[messages.LedgerState][]string {
	out := map[messages.LedgerState][]string{}
	for _, m := range msgs {
		l := m.(messages.PromptLedger)
		out[l.State] = append(out[l.State], l.GroupID)
	}
	return out
}

func TestStartAdmitsUpToCapacity(t *testing.T) {
	c, err := New(testConfig(2, 4, 1), &seqSource{})
	if err != nil {
		t.Fatal(err)
	}
	c.Start(t0)
	out := sent(c)
	pa := assigned(t, out["P"])
	// capacity = min(W − 0, (S+1)·B − 0) = min(4, 4) = 4.
	if len(pa) != 4 {
		t.Fatalf("admitted %d groups, want 4", len(pa))
	}
	for i, p := range pa {
		if p.NSamples != 2 || p.Task != "reverse" || p.Version != 0 || p.Attempt != 0 {
			t.Errorf("assignment %d = %v", i, p)
		}
	}
	if got := len(ledgerStates(out["L"])[messages.LedgerConsumed]); got != 4 {
		t.Errorf("consumed ledger entries = %d, want 4", got)
	}
	if len(out["C"]) != 1 || out["C"][0].(messages.CapacityChanged).Capacity != 0 {
		t.Errorf("capacity messages = %v", out["C"])
	}
}

func TestMiniBatchDispatchAndStepDone(t *testing.T) {
	c, _ := New(testConfig(2, 4, 1), &seqSource{})
	c.Start(t0)
	pa := assigned(t, sent(c)["P"])
	c.Step(t0, groupReady(t, pa[0].GroupID, pa[0].PromptID, 0, 0, 1))
	first := sent(c)
	if len(first["T"]) != 0 {
		t.Fatalf("dispatched after one group: %v", first["T"])
	}
	c.Step(t0, groupReady(t, pa[1].GroupID, pa[1].PromptID, 0, 1, 0))
	out := sent(c)
	if len(out["T"]) != 1 {
		t.Fatalf("want one TrainBatch after B=2 groups, got %d", len(out["T"]))
	}
	tb := out["T"][0].(messages.TrainBatch)
	if tb.Step != 1 || len(tb.GroupIDs) != 2 || tb.Trajectories != 4 || tb.Tokens != 12 {
		t.Fatalf("train batch = %v", tb)
	}
	batch, err := messages.DecodeTokenBatch(tb.Batch.Inline)
	if err != nil || batch.Len() != 4 {
		t.Fatalf("merged batch: %v, %v", batch, err)
	}
	// Each group is checked (GroupAccepted) as it arrives for the step.
	if n := len(first["S"]) + len(out["S"]); n != 2 {
		t.Fatalf("GroupAccepted messages = %d, want 2", n)
	}
	// Two finished groups free two worker slots, but the bound
	// (S+step)·B − (accepted+running) = 4 − 4 admits nothing before StepDone.
	if n := len(first["P"]) + len(out["P"]); n != 0 {
		t.Fatalf("admitted %d before the step advanced, want 0", n)
	}
	c.Step(t0, messages.StepDone{Step: 1, NewVersion: 1})
	out = sent(c)
	if got := ledgerStates(out["L"])[messages.LedgerTrained]; len(got) != 2 || got[0] != pa[0].GroupID {
		t.Fatalf("trained ledger = %v", got)
	}
	// Duplicate StepDone changes nothing.
	c.Step(t0, messages.StepDone{Step: 1, NewVersion: 1})
	if out := sent(c); len(ledgerStates(out["L"])[messages.LedgerTrained]) != 0 || c.Stats().Duplicates != 1 {
		t.Fatalf("duplicate StepDone settled again: %v", out)
	}
	if st := c.Stats(); st.Trained != 2 || st.Admitted != 6 || c.InFlight() != 4 { // StepDone raised the bound by B
		t.Fatalf("stats %+v in flight %d", st, c.InFlight())
	}
}

func TestFilteredGroupReleasesCapacityAndIsConsumed(t *testing.T) {
	c, _ := New(testConfig(2, 4, 1), &seqSource{})
	c.Start(t0)
	pa := assigned(t, sent(c)["P"])
	c.Step(t0, messages.GroupFiltered{GroupID: pa[0].GroupID, PromptID: pa[0].PromptID, Reason: messages.FilterZeroVariance})
	out := sent(c)
	if got := ledgerStates(out["L"])[messages.LedgerFiltered]; len(got) != 1 || got[0] != pa[0].GroupID {
		t.Fatalf("filtered ledger = %v", got)
	}
	next := assigned(t, out["P"])
	if len(next) != 1 || next[0].PromptID == pa[0].PromptID {
		t.Fatalf("after a filter, want one fresh prompt admitted, got %v", next)
	}
	// Filtering every group never deadlocks: keep filtering what is admitted.
	for range 20 {
		c.Step(t0, messages.GroupFiltered{GroupID: next[0].GroupID, PromptID: next[0].PromptID})
		next = assigned(t, sent(c)["P"])
		if len(next) != 1 {
			t.Fatalf("admission stopped after filters: %v", next)
		}
	}
}

func TestAbortRequeuesPromptOnce(t *testing.T) {
	c, _ := New(testConfig(2, 4, 1), &seqSource{})
	c.Start(t0)
	pa := assigned(t, sent(c)["P"])
	ab := messages.EpisodeAborted{GroupID: pa[2].GroupID, PromptID: pa[2].PromptID, Reason: "engine down"}
	c.Step(t0, ab)
	out := sent(c)
	rq := out["S"]
	if len(rq) != 1 || rq[0].(messages.GroupRequeued).Reason != messages.RequeueAborted {
		t.Fatalf("requeue messages = %v", rq)
	}
	again := assigned(t, out["P"])
	if len(again) != 1 || again[0].PromptID != pa[2].PromptID || again[0].Attempt != 1 || again[0].GroupID == pa[2].GroupID {
		t.Fatalf("requeued prompt should be re-admitted first with attempt 1 and a new group id, got %v", again)
	}
	// The group's other trajectories report aborts too: duplicates.
	c.Step(t0, ab)
	if out := sent(c); len(out["S"]) != 0 || len(out["P"]) != 0 || c.Stats().Duplicates != 1 {
		t.Fatalf("second abort of one group changed something: %v", out)
	}
}

func TestStaleGroupRequeuedAtTrainingTime(t *testing.T) {
	// S=0 under the token measure: a group must be trained at the version
	// it was generated with.
	cfg := testConfig(1, 1, 0)
	cfg.Staleness.Measure = staleness.MeasureToken
	c, _ := New(cfg, &seqSource{})
	c.Start(t0)
	pa := assigned(t, sent(c)["P"])
	c.Step(t0, groupReady(t, pa[0].GroupID, pa[0].PromptID, 0, 0, 1))
	out := sent(c)
	if len(out["T"]) != 1 || len(out["P"]) != 0 {
		t.Fatalf("step 1 not dispatched, or admitted beyond the bound: %v", out)
	}
	c.Step(t0, messages.StepDone{Step: 1, NewVersion: 1})
	next := assigned(t, sent(c)["P"])
	if len(next) != 1 || next[0].Version != 1 {
		t.Fatalf("after step 1 want one admission at version 1, got %v", next)
	}
	// The group's tokens come from version 0 (an engine that served old
	// weights) while the trainer is at version 1: staleness 1 > S = 0.
	c.Step(t0, groupReady(t, next[0].GroupID, next[0].PromptID, 0, 1, 0))
	out = sent(c)
	if len(out["T"]) != 0 {
		t.Fatalf("stale group was dispatched")
	}
	var rq messages.GroupRequeued
	for _, m := range out["S"] {
		if r, ok := m.(messages.GroupRequeued); ok {
			rq = r
		}
	}
	if rq.Reason != messages.RequeueStale || rq.GroupID != next[0].GroupID {
		t.Fatalf("want stale requeue of %s, got %v", next[0].GroupID, out["S"])
	}
	if st := c.Stats(); st.RequeuedStale != 1 {
		t.Fatalf("stats %+v", st)
	}
	if re := assigned(t, out["P"]); len(re) != 1 || re[0].PromptID != next[0].PromptID || re[0].Attempt != 1 {
		t.Fatalf("stale prompt not re-admitted: %v", re)
	}
}

func TestMaxStepsStopsAdmission(t *testing.T) {
	cfg := testConfig(1, 1, 0)
	cfg.MaxSteps = 1
	c, _ := New(cfg, &seqSource{})
	c.Start(t0)
	pa := assigned(t, sent(c)["P"])
	c.Step(t0, groupReady(t, pa[0].GroupID, pa[0].PromptID, 0, 0, 1))
	if out := sent(c); len(out["T"]) != 1 {
		t.Fatalf("step 1 not dispatched")
	}
	c.Step(t0, messages.StepDone{Step: 1, NewVersion: 1})
	if out := sent(c); len(out["P"]) != 0 || len(out["T"]) != 0 {
		t.Fatalf("admitted or dispatched past MaxSteps: %v", out)
	}
}

func TestExhaustedSourceOnlyRequeues(t *testing.T) {
	c, _ := New(testConfig(2, 4, 1), &seqSource{limit: 1})
	c.Start(t0)
	pa := assigned(t, sent(c)["P"])
	if len(pa) != 1 {
		t.Fatalf("admitted %d from a one-prompt source", len(pa))
	}
	c.Step(t0, messages.EpisodeAborted{GroupID: pa[0].GroupID, PromptID: pa[0].PromptID})
	if re := assigned(t, sent(c)["P"]); len(re) != 1 || re[0].PromptID != pa[0].PromptID {
		t.Fatalf("requeued prompt of an exhausted source not re-admitted: %v", re)
	}
}

func TestConfigValidate(t *testing.T) {
	for name, mut := range map[string]func(*Config){
		"B > W":      func(c *Config) { c.Staleness.MiniBatchSize = 8 },
		"n = 0":      func(c *Config) { c.NSamples = 0 },
		"no subject": func(c *Config) { c.Subjects.Train = "" },
		"steps < 0":  func(c *Config) { c.MaxSteps = -1 },
	} {
		cfg := testConfig(2, 4, 1)
		mut(&cfg)
		if _, err := New(cfg, &seqSource{}); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: err = %v, want ErrInvalidConfig", name, err)
		}
	}
	if _, err := New(testConfig(2, 4, 1), nil); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("nil source accepted")
	}
}

func TestUnansweredTrainBatchIsResent(t *testing.T) {
	cfg := testConfig(1, 1, 0)
	cfg.ResendTrainAfter = time.Second
	c, _ := New(cfg, &seqSource{})
	c.Start(t0)
	pa := assigned(t, sent(c)["P"])
	c.Step(t0, groupReady(t, pa[0].GroupID, pa[0].PromptID, 0, 0, 1))
	eff := c.Drain()
	var timer bool
	for _, tm := range eff.Timers {
		timer = timer || (tm.Name == timerResend && tm.At.Equal(t0.Add(time.Second)))
	}
	if !timer {
		t.Fatalf("no resend timer armed: %+v", eff.Timers)
	}
	c.Tick(t0.Add(time.Second), timerResend)
	out := sent(c)
	if len(out["T"]) != 1 || out["T"][0].(messages.TrainBatch).Step != 1 || c.Stats().Resent != 1 {
		t.Fatalf("TrainBatch not resent: %v", out)
	}
	c.Step(t0, messages.StepDone{Step: 1, NewVersion: 1})
	eff = c.Drain()
	var cancelled bool
	for _, tm := range eff.Timers {
		cancelled = cancelled || (tm.Name == timerResend && tm.Cancel)
	}
	if !cancelled {
		t.Fatalf("resend timer not cancelled by StepDone: %+v", eff.Timers)
	}
	c.Tick(t0.Add(2*time.Second), timerResend) // a tick already in flight
	if out := sent(c); len(out["T"]) != 0 {
		t.Fatalf("resent after StepDone: %v", out)
	}
}

func TestDuplicateGroupMessagesChangeNothing(t *testing.T) {
	c, _ := New(testConfig(2, 4, 1), &seqSource{})
	c.Start(t0)
	pa := assigned(t, sent(c)["P"])
	g := groupReady(t, pa[0].GroupID, pa[0].PromptID, 0, 0, 1)
	c.Step(t0, g)
	sent(c)
	before := c.Staleness()
	for _, m := range []messages.Message{g, messages.GroupFiltered{GroupID: g.GroupID, PromptID: g.PromptID},
		messages.EpisodeAborted{GroupID: g.GroupID, PromptID: g.PromptID}} {
		c.Step(t0, m)
		if out := sent(c); len(out["P"])+len(out["T"])+len(out["L"])+len(out["S"]) != 0 {
			t.Fatalf("duplicate %s produced %v", m.Kind(), out)
		}
	}
	after := c.Staleness()
	if before.Accepted != after.Accepted || before.Running != after.Running || c.Stats().Duplicates != 3 {
		t.Fatalf("counters moved: before %+v after %+v, stats %+v", before, after, c.Stats())
	}
}
