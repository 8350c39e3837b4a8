package staleness

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

func mustNew(t *testing.T, s, w, b int64, p StalePolicy) *Controller {
	t.Helper()
	return mustNewM(t, s, w, b, p, MeasureScheduled)
}

func mustNewM(t *testing.T, s, w, b int64, p StalePolicy, m Measure) *Controller {
	t.Helper()
	c, err := New(Config{MaxStalenessSteps: s, NumParallelGenerationWorkers: w, MiniBatchSize: b, StalePolicy: p, Measure: m})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func acquire(t *testing.T, c *Controller, prompt string) Admission {
	t.Helper()
	a, ok := c.TryAcquire(prompt, t0)
	if !ok {
		t.Fatalf("acquire %s: no capacity (%+v)", prompt, c.Metrics())
	}
	return a
}

// The SkyRL reference example.
func TestReferenceExample(t *testing.T) {
	c := mustNew(t, 1, 4, 2, PolicyRequeue)
	var ids []string
	for i := range 4 {
		ids = append(ids, acquire(t, c, "p"+string(rune('a'+i))).GroupID)
	}
	if _, ok := c.TryAcquire("p5", t0); ok {
		t.Fatal("fifth acquire admitted with W=4")
	}
	for _, id := range ids {
		if err := c.Accept(id, UnknownVersion, t0); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.Capacity(); got != 0 {
		t.Fatalf("capacity after 4 accepts = %d, want 0", got)
	}
	if err := c.Filter(ids[0], t0); err != nil {
		t.Fatal(err)
	}
	m := c.Metrics()
	if m.Capacity != 1 || m.Accepted != 3 || m.Filtered != 1 || m.Running != 0 || m.Submitted != 4 {
		t.Fatalf("after filter: %+v", m)
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name    string
		s, w, b int64
		p       StalePolicy
		ok      bool
	}{
		{"W=B", 4, 8, 8, PolicyRequeue, true},
		{"W=B(S+1)", 1, 4, 2, PolicyAccept, true},
		{"W<B", 4, 3, 4, PolicyRequeue, false},
		{"W>B(S+1)", 1, 5, 2, PolicyRequeue, false},
		{"S=0 W=B", 0, 3, 3, PolicyRequeue, true},
		{"B=0", 4, 0, 0, PolicyRequeue, false},
		{"S<0", -1, 2, 2, PolicyRequeue, false},
		{"bad policy", 4, 2, 2, "drop", false},
		{"empty policy", 4, 2, 2, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Config{MaxStalenessSteps: tc.s, NumParallelGenerationWorkers: tc.w, MiniBatchSize: tc.b, StalePolicy: tc.p}.Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%t", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
			}
		})
	}
	err := Config{MaxStalenessSteps: 1, NumParallelGenerationWorkers: 5, MiniBatchSize: 2, StalePolicy: PolicyRequeue}.Validate()
	for _, want := range []string{"B=2", "W=5", "S=1", "[2, 4]"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v should state %q", err, want)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config invalid: %v", err)
	}
}

// Capacity formula, table-driven over counter states reached by real
// operations.
func TestCapacityTable(t *testing.T) {
	cases := []struct {
		name                               string
		s, w, b                            int64
		acquire, accept, filter, stepsDone int
		want                               int64
	}{
		{"fresh: min(W, (S+1)B)", 4, 8, 4, 0, 0, 0, 0, 8},
		{"worker bound", 4, 8, 4, 8, 0, 0, 0, 0},
		{"accepted free workers but not staleness", 1, 4, 2, 4, 4, 0, 0, 0},
		{"step grows the bound by B", 1, 4, 2, 4, 4, 0, 1, 2},
		{"two steps", 1, 4, 2, 4, 4, 0, 2, 4},
		{"filter releases", 1, 4, 2, 4, 4, 2, 0, 2},
		{"S=0", 0, 2, 2, 2, 2, 0, 0, 0},
		{"S=0 step", 0, 2, 2, 2, 2, 0, 1, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := mustNew(t, tc.s, tc.w, tc.b, PolicyAccept)
			var ids []string
			for i := range tc.acquire {
				ids = append(ids, acquire(t, c, "p"+string(rune('a'+i))).GroupID)
			}
			for _, id := range ids[:tc.accept] {
				if err := c.Accept(id, UnknownVersion, t0); err != nil {
					t.Fatal(err)
				}
			}
			for _, id := range ids[:tc.filter] {
				if err := c.Filter(id, t0); err != nil {
					t.Fatal(err)
				}
			}
			for range tc.stepsDone {
				if _, err := c.StepDone(c.Step(), t0); err != nil {
					t.Fatal(err)
				}
			}
			if got := c.Capacity(); got != tc.want {
				t.Fatalf("capacity = %d, want %d (%+v)", got, tc.want, c.Metrics())
			}
		})
	}
}

func TestAbortRequeuesAndReleases(t *testing.T) {
	c := mustNew(t, 1, 2, 2, PolicyRequeue)
	a := acquire(t, c, "p1")
	acquire(t, c, "p2")
	if c.Capacity() != 0 {
		t.Fatalf("capacity %d", c.Capacity())
	}
	if err := c.Abort(a.GroupID, t0); err != nil {
		t.Fatal(err)
	}
	if c.Capacity() != 1 {
		t.Fatalf("abort did not release: capacity %d", c.Capacity())
	}
	rq := c.Drain()
	if len(rq) != 1 || rq[0].PromptID != "p1" || rq[0].Reason != ReasonAborted {
		t.Fatalf("requeues %v", rq)
	}
	if len(c.Drain()) != 0 {
		t.Fatal("drain did not clear")
	}
	b := acquire(t, c, "p1")
	if b.GroupID == a.GroupID {
		t.Fatalf("requeued prompt reused group id %s", b.GroupID)
	}
}

func TestWrongStateAndUnknown(t *testing.T) {
	c := mustNew(t, 1, 2, 2, PolicyRequeue)
	a := acquire(t, c, "p1")
	if err := c.Filter(a.GroupID, t0); !errors.Is(err, ErrWrongState) {
		t.Fatalf("filter of running group: %v", err)
	}
	if _, err := c.CheckForTraining(a.GroupID, t0); !errors.Is(err, ErrWrongState) {
		t.Fatalf("check of running group: %v", err)
	}
	if err := c.Accept(a.GroupID, 0, t0); err != nil {
		t.Fatal(err)
	}
	if err := c.Accept(a.GroupID, 0, t0); !errors.Is(err, ErrWrongState) {
		t.Fatalf("duplicate accept: %v", err)
	}
	if err := c.Abort(a.GroupID, t0); !errors.Is(err, ErrWrongState) {
		t.Fatalf("abort of accepted: %v", err)
	}
	if err := c.Accept("nope", 0, t0); !errors.Is(err, ErrUnknownGroup) {
		t.Fatalf("unknown: %v", err)
	}
	m := c.Metrics()
	if m.Running != 0 || m.Accepted != 1 || m.Submitted != 1 {
		t.Fatalf("rejected ops changed counters: %+v", m)
	}
}

func TestStepDone(t *testing.T) {
	c := mustNew(t, 1, 2, 2, PolicyRequeue)
	if ok, err := c.StepDone(1, t0); !ok || err != nil {
		t.Fatalf("StepDone(1) = %t, %v", ok, err)
	}
	if ok, err := c.StepDone(1, t0); ok || err != nil {
		t.Fatalf("duplicate StepDone(1) = %t, %v", ok, err)
	}
	if _, err := c.StepDone(5, t0); !errors.Is(err, ErrStepAhead) {
		t.Fatalf("StepDone(5) = %v", err)
	}
	if c.Step() != 2 || c.Version() != 1 {
		t.Fatalf("step %d version %d", c.Step(), c.Version())
	}
}

// A group scheduled at step i and trained at step j has staleness j − i;
// beyond S it is dropped and requeued under PolicyRequeue, trained and
// counted under PolicyAccept.
func TestCheckForTraining(t *testing.T) {
	cases := []struct {
		name        string
		measure     Measure
		policy      StalePolicy
		stepsBefore int   // StepDone calls between scheduling and the check
		oldest      int64 // reported oldest version; UnknownVersion = scheduled
		wantVerdict Verdict
		wantLag     int64
		wantViol    bool
	}{
		{"fresh", MeasureToken, PolicyRequeue, 0, UnknownVersion, Train, 0, false},
		{"at the bound", MeasureToken, PolicyRequeue, 2, UnknownVersion, Train, 2, false},
		{"over the bound requeues", MeasureToken, PolicyRequeue, 3, UnknownVersion, Drop, 3, true},
		{"over the bound accepted", MeasureToken, PolicyAccept, 3, UnknownVersion, Train, 3, true},
		{"reported version within bound", MeasureToken, PolicyRequeue, 2, 1, Train, 1, false},
		{"future token clamps", MeasureToken, PolicyRequeue, 0, 7, Train, 0, false},
		{"scheduled: fresh", MeasureScheduled, PolicyRequeue, 0, UnknownVersion, Train, 0, false},
		{"scheduled: over the bound requeues", MeasureScheduled, PolicyRequeue, 3, UnknownVersion, Drop, 3, true},
		// The same input as "reported version within bound": scheduled
		// counts the two steps since admission, not the token's version.
		{"scheduled: reported version ignored", MeasureScheduled, PolicyRequeue, 2, 1, Train, 2, false},
		{"scheduled: future token ignored", MeasureScheduled, PolicyRequeue, 0, 7, Train, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// S=2, B=1, W=3: stepping without training is allowed.
			c := mustNewM(t, 2, 3, 1, tc.policy, tc.measure)
			a := acquire(t, c, "p")
			for range tc.stepsBefore {
				if _, err := c.StepDone(c.Step(), t0); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Accept(a.GroupID, tc.oldest, t0); err != nil {
				t.Fatal(err)
			}
			d, err := c.CheckForTraining(a.GroupID, t0)
			if err != nil {
				t.Fatal(err)
			}
			if d.Verdict != tc.wantVerdict || d.Staleness != tc.wantLag || d.Violation != tc.wantViol {
				t.Fatalf("decision %v, want %v lag %d violation %t", d, tc.wantVerdict, tc.wantLag, tc.wantViol)
			}
			m := c.Metrics()
			rq := c.Drain()
			if tc.wantVerdict == Drop {
				if len(rq) != 1 || rq[0].Reason != ReasonStale || rq[0].PromptID != "p" || m.StaleDropped != 1 || m.Accepted != 0 {
					t.Fatalf("drop: requeues %v metrics %+v", rq, m)
				}
			} else {
				if len(rq) != 0 || m.Trained != 1 || m.Accepted != 1 {
					t.Fatalf("train: requeues %v metrics %+v", rq, m)
				}
				wantViol := int64(0)
				if tc.wantViol {
					wantViol = 1
				}
				if m.Violations != wantViol || m.StalenessMax != tc.wantLag {
					t.Fatalf("metrics %+v", m)
				}
			}
		})
	}
}

// An engine that lagged behind: the group was scheduled at step 4 (version
// 3) but its oldest token came from version 0 — staleness 3 > S=2.
func TestOldestTokenNotSchedulingStep(t *testing.T) {
	c := mustNewM(t, 2, 3, 1, PolicyRequeue, MeasureToken)
	for range 3 {
		if _, err := c.StepDone(c.Step(), t0); err != nil {
			t.Fatal(err)
		}
	}
	a := acquire(t, c, "p")
	if a.ScheduledStep != 4 || a.ScheduledVersion != 3 {
		t.Fatalf("admission %+v", a)
	}
	if err := c.Accept(a.GroupID, 0, t0); err != nil {
		t.Fatal(err)
	}
	d, err := c.CheckForTraining(a.GroupID, t0)
	if err != nil {
		t.Fatal(err)
	}
	if d.Verdict != Drop || d.Staleness != 3 {
		t.Fatalf("decision %v", d)
	}
}

// An engine that lags (it served version 0 to a group scheduled at step 4,
// version 3): SkyRL's scheduled measure sees staleness 0 and trains the
// group; the token measure sees 3 > S=2 and requeues it. Both are reported.
func TestMeasuresDisagreeWhenAnEngineLags(t *testing.T) {
	for _, tc := range []struct {
		m       Measure
		verdict Verdict
		lag     int64
	}{{MeasureScheduled, Train, 0}, {MeasureToken, Drop, 3}, {"", Train, 0}} {
		c := mustNewM(t, 2, 3, 1, PolicyRequeue, tc.m)
		for range 3 {
			if _, err := c.StepDone(c.Step(), t0); err != nil {
				t.Fatal(err)
			}
		}
		a := acquire(t, c, "p")
		if err := c.Accept(a.GroupID, 0, t0); err != nil {
			t.Fatal(err)
		}
		d, err := c.CheckForTraining(a.GroupID, t0)
		if err != nil {
			t.Fatal(err)
		}
		if d.Verdict != tc.verdict || d.Staleness != tc.lag || d.Scheduled != 0 || d.Token != 3 {
			t.Fatalf("measure %q: %v, want %v staleness %d (scheduled 0, token 3)", tc.m, d, tc.verdict, tc.lag)
		}
	}
	if _, err := New(Config{MaxStalenessSteps: 1, NumParallelGenerationWorkers: 1, MiniBatchSize: 1, StalePolicy: PolicyRequeue, Measure: "oldest"}); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "measure") {
		t.Fatalf("bad measure: %v", err)
	}
}

func TestStalenessHistogramAndMean(t *testing.T) {
	c := mustNewM(t, 1, 2, 1, PolicyAccept, MeasureToken)
	// lags 0, 1, 3 → hist [1,1,1] (last bucket is > S), mean 4/3, max 3.
	lags := []int64{0, 1, 3}
	for range 3 {
		if _, err := c.StepDone(c.Step(), t0); err != nil {
			t.Fatal(err)
		}
	}
	for i, lag := range lags {
		a := acquire(t, c, "p")
		if err := c.Accept(a.GroupID, c.Version()-lag, t0); err != nil {
			t.Fatal(err)
		}
		if _, err := c.CheckForTraining(a.GroupID, t0); err != nil {
			t.Fatal(err)
		}
		if _, err := c.StepDone(c.Step(), t0); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	m := c.Metrics()
	if got := m.StalenessHistogram; len(got) != 3 || got[0] != 1 || got[1] != 1 || got[2] != 1 {
		t.Fatalf("histogram %v", got)
	}
	if m.StalenessMax != 3 || m.StalenessMean != 4.0/3 || m.Violations != 1 {
		t.Fatalf("metrics %+v", m)
	}
}

func TestIdleAccounting(t *testing.T) {
	// W=2, B=1, S=1.
	c := mustNew(t, 1, 2, 1, PolicyRequeue)
	c.Tick(at(0))
	a, _ := c.TryAcquire("a", at(10)) // 0..10: 2 idle workers, trainer idle
	b, _ := c.TryAcquire("b", at(10))
	// 10..20: both busy; capacity 0 now.
	if err := c.Accept(a.GroupID, UnknownVersion, at(20)); err != nil {
		t.Fatal(err)
	}
	// 20..30: one idle worker, capacity = min(1, 2−2) = 0 → blocked.
	if _, err := c.CheckForTraining(a.GroupID, at(30)); err != nil {
		t.Fatal(err)
	}
	// 30..40: trainer busy (B=1 fed), one worker idle and blocked.
	if _, err := c.StepDone(1, at(40)); err != nil {
		t.Fatal(err)
	}
	_ = b
	c.Tick(at(45)) // 40..45: trainer idle, one worker idle, capacity 1 → not blocked.
	c.Tick(at(44)) // going back in time adds nothing.
	m := c.Metrics()
	wantEngine := 2*10*time.Second + 0 + 10*time.Second + 10*time.Second + 5*time.Second
	wantBlocked := 20 * time.Second
	wantTrainer := 30*time.Second + 5*time.Second
	if m.EngineIdle != wantEngine || m.EngineBlocked != wantBlocked || m.TrainerIdle != wantTrainer {
		t.Fatalf("idle engine %v blocked %v trainer %v; want %v %v %v",
			m.EngineIdle, m.EngineBlocked, m.TrainerIdle, wantEngine, wantBlocked, wantTrainer)
	}
}

func TestResume(t *testing.T) {
	cfg := Config{MaxStalenessSteps: 3, NumParallelGenerationWorkers: 8, MiniBatchSize: 2, StalePolicy: PolicyRequeue}
	c, err := Resume(cfg, 10, 1)
	if err != nil {
		t.Fatal(err)
	}
	if c.Step() != 10 || c.Version() != 9 {
		t.Fatalf("resumed: step %d version %d", c.Step(), c.Version())
	}
	// After W groups finish untrained, a resumed run is at its bound
	// ((S+10)·B − 9·B − 8 = 0), exactly like a fresh run at step 1; a
	// naive restart at step 10 would still have 18 slots.
	for range 8 {
		a := acquire(t, c, "p")
		if err := c.Accept(a.GroupID, UnknownVersion, t0); err != nil {
			t.Fatal(err)
		}
	}
	if c.Capacity() != 0 {
		t.Fatalf("capacity %d, want 0", c.Capacity())
	}
	if _, err := Resume(cfg, 0, 1); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Resume(step 0): %v", err)
	}
	if _, err := Resume(cfg, 3, 0); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Resume(epoch 0): %v", err)
	}
}

// A restarted controller never reissues a pre-restart group id, so a late
// message for an old group cannot be taken for a new one (found by sim).
func TestResumeNeverReusesGroupIDs(t *testing.T) {
	cfg := Config{MaxStalenessSteps: 1, NumParallelGenerationWorkers: 2, MiniBatchSize: 2, StalePolicy: PolicyRequeue}
	before, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	old := acquire(t, before, "p")
	seen := map[string]bool{old.GroupID: true}
	for epoch := int64(1); epoch <= 3; epoch++ {
		c, err := Resume(cfg, 1, epoch)
		if err != nil {
			t.Fatal(err)
		}
		a := acquire(t, c, "p")
		if seen[a.GroupID] {
			t.Fatalf("epoch %d reissued group id %q", epoch, a.GroupID)
		}
		seen[a.GroupID] = true
		if err := c.Accept(old.GroupID, UnknownVersion, t0); !errors.Is(err, ErrUnknownGroup) {
			t.Fatalf("epoch %d: late Accept of pre-restart group %q: err %v, want ErrUnknownGroup", epoch, old.GroupID, err)
		}
	}
}

// Release hands an accepted group back: its capacity returns, its prompt is
// requeued, and a second Release (or one of a running group) changes nothing.
func TestRelease(t *testing.T) {
	c := mustNew(t, 0, 1, 1, PolicyRequeue)
	a := acquire(t, c, "p")
	if err := c.Release(a.GroupID, t0); !errors.Is(err, ErrWrongState) {
		t.Fatalf("release of a running group: %v", err)
	}
	if err := c.Accept(a.GroupID, UnknownVersion, t0); err != nil {
		t.Fatal(err)
	}
	if c.Capacity() != 0 {
		t.Fatalf("capacity %d before release", c.Capacity())
	}
	if err := c.Release(a.GroupID, t0); err != nil {
		t.Fatal(err)
	}
	rq := c.Drain()
	if len(rq) != 1 || rq[0].Reason != ReasonReleased || rq[0].PromptID != "p" || c.Capacity() != 1 || c.Metrics().Released != 1 {
		t.Fatalf("requeues %v capacity %d metrics %+v", rq, c.Capacity(), c.Metrics())
	}
	if err := c.Release(a.GroupID, t0); !errors.Is(err, ErrUnknownGroup) {
		t.Fatalf("second release: %v", err)
	}
}

// ResumeInFlight: restarted while step 3's batch is out, the controller
// stays at step 3 (a group admitted now is scheduled at 3, as SkyRL's
// global_step says) with the same capacity the uninterrupted controller
// had, and StepDone(3) advances it.
func TestResumeInFlight(t *testing.T) {
	cfg := Config{MaxStalenessSteps: 1, NumParallelGenerationWorkers: 2, MiniBatchSize: 2, StalePolicy: PolicyRequeue}
	c, err := ResumeInFlight(cfg, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	if c.Step() != 3 || c.Capacity() != 2 {
		t.Fatalf("step %d capacity %d, want 3 and (S+3)·B − 3·B = 2", c.Step(), c.Capacity())
	}
	a := acquire(t, c, "p")
	if a.ScheduledStep != 3 {
		t.Fatalf("scheduled at %d, want 3", a.ScheduledStep)
	}
	if ok, err := c.StepDone(3, t0); !ok || err != nil || c.Step() != 4 {
		t.Fatalf("StepDone(3): %t %v step %d", ok, err, c.Step())
	}
}

// Consume: an accepted group used up by the step without training keeps
// its place in accepted (no capacity back), leaves the books, and is not a
// staleness observation; WouldDrop changes nothing.
func TestConsumeAndWouldDrop(t *testing.T) {
	c := mustNew(t, 0, 2, 2, PolicyRequeue)
	a, b := acquire(t, c, "a"), acquire(t, c, "b")
	for _, id := range []string{a.GroupID, b.GroupID} {
		if err := c.Accept(id, UnknownVersion, t0); err != nil {
			t.Fatal(err)
		}
	}
	if drop, err := c.WouldDrop(a.GroupID); drop || err != nil {
		t.Fatalf("fresh group: drop=%t %v", drop, err)
	}
	if err := c.Consume(b.GroupID, t0); err != nil {
		t.Fatal(err)
	}
	m := c.Metrics()
	if m.Accepted != 2 || m.Trained != 1 || m.Capacity != 0 || len(m.StalenessHistogram) == 0 || m.StalenessHistogram[0] != 0 {
		t.Fatalf("after consume: %+v", m)
	}
	if err := c.Consume(b.GroupID, t0); !errors.Is(err, ErrUnknownGroup) {
		t.Fatalf("second consume: %v", err)
	}
	if _, err := c.StepDone(1, t0); err != nil {
		t.Fatal(err)
	}
	if drop, err := c.WouldDrop(a.GroupID); !drop || err != nil || c.Groups() != 1 {
		t.Fatalf("a group one step old with S=0: drop=%t %v groups %d", drop, err, c.Groups())
	}
}
