package actors

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func spawnCounter(t *testing.T, h *harness, cfg ShellConfig, every int) (*Shell[cmsg, cout], *recorder, *sendRec) {
	t.Helper()
	rec, snd := newRecorder(), &sendRec{}
	sh, err := Spawn(h.sys, cfg, counterFactory(rec, every), Sender[cout](snd))
	if err != nil {
		t.Fatal(err)
	}
	return sh, rec, snd
}

func TestShellStepsInMessageOrder(t *testing.T) {
	h := newHarness(t)
	sh, rec, snd := spawnCounter(t, h, DefaultShellConfig("counter", "test"), 10)
	const n = 200
	for i := range n {
		if err := sh.Tell(cmsg{N: i}); err != nil {
			t.Fatalf("tell %d: %v", i, err)
		}
	}
	eventually(t, "all steps", func() bool { s, _, _, _ := rec.snapshot(); return len(s) == n })
	steps, counts, _, _ := rec.snapshot()
	for i := range n {
		if steps[i] != i || counts[i] != i+1 {
			t.Fatalf("step %d: got N=%d count=%d, want N=%d count=%d", i, steps[i], counts[i], i, i+1)
		}
	}
	sent := snd.get()
	if len(sent) != n/10 {
		t.Fatalf("sends: got %d, want %d", len(sent), n/10)
	}
	for i, s := range sent {
		if s.Subject != "out.batch" || s.Msg.Count != (i+1)*10 {
			t.Fatalf("send %d: got %+v", i, s)
		}
	}
	// Log effects carry the per-actor fields; the RateKey'd warning was
	// written once (all 20 batches came within one LogInterval).
	if got := h.logs.count(`"message":"batch done"`); got != 1 {
		t.Fatalf("rate-limited batch log lines: got %d, want 1\n%s", got, h.logs.String())
	}
	if !strings.Contains(h.logs.String(), `"actor":"counter","role":"test","run_id":"run-1"`) {
		t.Fatalf("log lines lack actor fields:\n%s", h.logs.String())
	}
	if sh.Incarnations() != 1 {
		t.Fatalf("incarnations: %d", sh.Incarnations())
	}
}

func TestTimersFireOnManualClock(t *testing.T) {
	h := newHarness(t)
	sh, rec, snd := spawnCounter(t, h, DefaultShellConfig("timers", "test"), 2)
	_ = sh.Tell(cmsg{N: 1})
	_ = sh.Tell(cmsg{N: 2}) // count 2: batch + flush timer at t0+1s
	eventually(t, "timer armed", func() bool { return len(h.clock.Pending()) == 1 })
	if p := h.clock.Pending()[0]; !p.Equal(t0.Add(time.Second)) {
		t.Fatalf("deadline: got %v, want %v", p, t0.Add(time.Second))
	}
	h.clock.Advance(999 * time.Millisecond)
	if len(h.clock.Pending()) != 1 {
		t.Fatal("timer fired before its deadline")
	}
	// Re-arm: two more messages move the deadline to now+1s = t0+1.999s.
	_ = sh.Tell(cmsg{N: 3})
	_ = sh.Tell(cmsg{N: 4})
	want := t0.Add(1999 * time.Millisecond)
	eventually(t, "timer re-armed", func() bool {
		p := h.clock.Pending()
		return len(p) == 1 && p[0].Equal(want)
	})
	h.clock.Advance(time.Second)
	eventually(t, "tick", func() bool { _, _, ticks, _ := rec.snapshot(); return len(ticks) == 1 })
	_, _, ticks, at := rec.snapshot()
	if ticks[0] != "flush" || !at[0].Equal(t0.Add(1999*time.Millisecond)) {
		t.Fatalf("tick: got %q at %v, want flush at %v", ticks[0], at[0], want)
	}
	eventually(t, "flush sent", func() bool { return len(snd.get()) == 3 })
	if s := snd.get()[2]; s.Subject != "out.flush" || s.Msg.Count != 4 {
		t.Fatalf("flush send: %+v", s)
	}
	// A timer fires once per arming: more time brings no more ticks.
	h.clock.Advance(10 * time.Second)
	_ = sh.Tell(cmsg{N: 5})
	eventually(t, "step 5", func() bool { s, _, _, _ := rec.snapshot(); return len(s) == 5 })
	if _, _, ticks, _ := rec.snapshot(); len(ticks) != 1 {
		t.Fatalf("ticks: %v", ticks)
	}
}

// cancelCore arms a timer on "arm" and cancels it on "cancel".
type cancelCore struct {
	Effects[string]
	ticks *[]string
	mu    *sync.Mutex
}

func (c *cancelCore) Step(now time.Time, in string) {
	switch in {
	case "arm":
		c.SetTimer("t", now.Add(time.Second))
	case "cancel":
		c.CancelTimer("t")
	case "due":
		c.SetTimer("past", now.Add(-time.Second))
	}
}

func (c *cancelCore) Tick(_ time.Time, name string) {
	c.mu.Lock()
	*c.ticks = append(*c.ticks, name)
	c.mu.Unlock()
}

func TestTimerCancelAndPastDeadline(t *testing.T) {
	h := newHarness(t)
	var mu sync.Mutex
	var ticks []string
	sh, err := Spawn(h.sys, DefaultShellConfig("cancel", "test"), func() Core[string, string] {
		return &cancelCore{ticks: &ticks, mu: &mu}
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = sh.Tell("arm")
	eventually(t, "armed", func() bool { return len(h.clock.Pending()) == 1 })
	_ = sh.Tell("cancel")
	eventually(t, "cancelled", func() bool { return len(h.clock.Pending()) == 0 })
	h.clock.Advance(time.Hour)
	_ = sh.Tell("due") // a deadline in the past fires at once
	eventually(t, "past-deadline tick", func() bool { mu.Lock(); defer mu.Unlock(); return len(ticks) == 1 })
	mu.Lock()
	defer mu.Unlock()
	if ticks[0] != "past" {
		t.Fatalf("ticks: %v (the cancelled timer must not fire)", ticks)
	}
}

func supCfg() SupervisionConfig {
	c := DefaultSupervisionConfig()
	c.InitialBackoff = 100 * time.Millisecond
	c.MaxBackoff = time.Second
	c.Multiplier = 2
	c.Jitter = 0
	c.MaxFailures = 3
	c.Window = time.Minute
	return c
}

func TestPanicRestartsWithBackoffThenEscalates(t *testing.T) {
	type esc struct {
		name string
		err  error
	}
	escalated := make(chan esc, 1)
	h := newHarness(t)
	cfg := DefaultShellConfig("crashy", "test")
	cfg.Supervision = supCfg()
	cfg.OnEscalate = func(name string, err error) { escalated <- esc{name, err} }
	sh, rec, _ := spawnCounter(t, h, cfg, 1000)

	_ = sh.Tell(cmsg{N: 1})
	_ = sh.Tell(cmsg{N: 2})
	eventually(t, "two steps", func() bool { s, _, _, _ := rec.snapshot(); return len(s) == 2 })

	// Failure 1: restart scheduled InitialBackoff later, not before.
	_ = sh.Tell(cmsg{N: 3, Panic: true})
	_ = sh.Tell(cmsg{N: 4}) // queued behind the failure; survives the restart
	eventually(t, "restart 1 scheduled", func() bool { return len(h.clock.Pending()) == 1 })
	if p := h.clock.Pending()[0]; !p.Equal(t0.Add(100 * time.Millisecond)) {
		t.Fatalf("first backoff deadline %v, want t0+100ms", p)
	}
	if sh.Incarnations() != 1 {
		t.Fatal("restarted before the backoff elapsed")
	}
	h.clock.Advance(100 * time.Millisecond)
	eventually(t, "restart 1", func() bool { return sh.Incarnations() == 2 })
	eventually(t, "queued message stepped by the new core", func() bool { s, _, _, _ := rec.snapshot(); return len(s) == 3 })
	steps, counts, _, _ := rec.snapshot()
	if steps[2] != 4 || counts[2] != 1 {
		t.Fatalf("after restart: step N=%d count=%d, want N=4 count=1 (fresh core)", steps[2], counts[2])
	}

	// Failure 2: backoff doubles.
	now := h.clock.Now()
	_ = sh.Tell(cmsg{N: 5, Panic: true})
	eventually(t, "restart 2 scheduled", func() bool { return len(h.clock.Pending()) == 1 })
	if p := h.clock.Pending()[0]; !p.Equal(now.Add(200 * time.Millisecond)) {
		t.Fatalf("second backoff deadline %v, want +200ms", p.Sub(now))
	}
	h.clock.Advance(200 * time.Millisecond)
	eventually(t, "restart 2", func() bool { return sh.Incarnations() == 3 })

	// Failure 3 within the window: escalate, no restart.
	_ = sh.Tell(cmsg{N: 6, Panic: true})
	var e esc
	select {
	case e = <-escalated:
	case <-time.After(5 * time.Second):
		t.Fatal("no escalation")
	}
	if e.name != "crashy" || !errors.Is(e.err, ErrEscalated) || !errors.Is(e.err, ErrPanic) || !strings.Contains(e.err.Error(), "boom 6") {
		t.Fatalf("escalation: %q %v", e.name, e.err)
	}
	select {
	case <-sh.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("escalated actor did not stop")
	}
	if len(h.clock.Pending()) != 0 {
		t.Fatal("a restart was scheduled after escalation")
	}
	if err := sh.Tell(cmsg{N: 7}); !errors.Is(err, ErrStopped) {
		t.Fatalf("tell after escalation: %v", err)
	}
	if got := testutil.ToFloat64(h.sys.metrics.restarts.WithLabelValues("crashy")); got != 2 {
		t.Fatalf("restarts metric %v", got)
	}
	if got := testutil.ToFloat64(h.sys.metrics.escalated.WithLabelValues("crashy")); got != 1 {
		t.Fatalf("escalations metric %v", got)
	}
	if got := testutil.ToFloat64(h.sys.metrics.panics.WithLabelValues("crashy")); got != 3 {
		t.Fatalf("panics metric %v", got)
	}
	if sh.Incarnations() != 3 || sh.Restarts() != 2 {
		t.Fatalf("incarnations %d restarts %d", sh.Incarnations(), sh.Restarts())
	}
	// protoactor's own Info-level supervision chatter stays out of the log.
	if strings.Contains(h.logs.String(), "Recovering") {
		t.Fatalf("protoactor noise leaked:\n%s", h.logs.String())
	}
	if h.logs.count(`"message":"core panicked"`) != 3 {
		t.Fatalf("want 3 logged panics:\n%s", h.logs.String())
	}
}

func TestFailuresOutsideWindowResetBackoff(t *testing.T) {
	h := newHarness(t)
	cfg := DefaultShellConfig("slowcrash", "test")
	cfg.Supervision = supCfg()
	cfg.Supervision.Window = time.Second
	cfg.Supervision.MaxFailures = 2
	sh, _, _ := spawnCounter(t, h, cfg, 1000)
	for i := range 4 {
		start := h.clock.Now()
		_ = sh.Tell(cmsg{Panic: true})
		eventually(t, "restart scheduled", func() bool { return len(h.clock.Pending()) == 1 })
		// Each failure is alone in its window: first-failure backoff, no escalation.
		if p := h.clock.Pending()[0]; !p.Equal(start.Add(100 * time.Millisecond)) {
			t.Fatalf("failure %d: backoff %v, want 100ms", i, p.Sub(start))
		}
		h.clock.Advance(100 * time.Millisecond)
		eventually(t, "restarted", func() bool { return sh.Incarnations() == i+2 })
		h.clock.Advance(2 * time.Second)
	}
	select {
	case <-sh.Done():
		t.Fatal("escalated although failures were outside the window")
	default:
	}
}

func TestBackoffJitterComesFromInjectedRand(t *testing.T) {
	h := newHarness(t)
	cfg := DefaultShellConfig("jitter", "test")
	cfg.Supervision = supCfg()
	cfg.Supervision.Jitter = 0.5
	cfg.Supervision.MaxFailures = 10
	cfg.Supervision.Rand = rand.New(rand.NewPCG(7, 11))
	ref := rand.New(rand.NewPCG(7, 11))
	sh, _, _ := spawnCounter(t, h, cfg, 1000)
	for n := 1; n <= 3; n++ {
		start := h.clock.Now()
		_ = sh.Tell(cmsg{Panic: true})
		eventually(t, "restart scheduled", func() bool { return len(h.clock.Pending()) == 1 })
		want := cfg.Supervision.Backoff(n, ref.Float64())
		if got := h.clock.Pending()[0].Sub(start); got != want {
			t.Fatalf("failure %d: backoff %v, want %v", n, got, want)
		}
		h.clock.Advance(want)
		eventually(t, "restarted", func() bool { return sh.Incarnations() == n+1 })
	}
}

func TestDeciderStopAndEscalate(t *testing.T) {
	for _, tc := range []struct {
		dir     Directive
		wantEsc bool
	}{{Stop, false}, {Escalate, true}} {
		t.Run(fmt.Sprint(tc.dir), func(t *testing.T) {
			escalated := make(chan error, 1)
			h := newHarness(t, func(c *SystemConfig) { c.OnEscalate = func(_ string, err error) { escalated <- err } })
			cfg := DefaultShellConfig("decided", "test")
			cfg.Supervision = supCfg()
			cfg.Supervision.Decider = func(error) Directive { return tc.dir }
			sh, _, _ := spawnCounter(t, h, cfg, 1000)
			_ = sh.Tell(cmsg{Panic: true})
			select {
			case <-sh.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("actor not stopped")
			}
			if sh.Incarnations() != 1 {
				t.Fatal("restarted")
			}
			if tc.wantEsc {
				select {
				case err := <-escalated:
					if !errors.Is(err, ErrEscalated) {
						t.Fatalf("err %v", err)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("system OnEscalate not called")
				}
			} else if len(escalated) != 0 {
				t.Fatal("Stop directive escalated")
			}
		})
	}
}

func TestFactoryPanicIsSupervised(t *testing.T) {
	h := newHarness(t)
	cfg := DefaultShellConfig("badfactory", "test")
	cfg.Supervision = supCfg()
	var calls int
	var mu sync.Mutex
	rec := newRecorder()
	sh, err := Spawn(h.sys, cfg, func() Core[cmsg, cout] {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			panic("cannot load state")
		}
		return &counterCore{every: 1000, rec: rec}
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "restart scheduled", func() bool { return len(h.clock.Pending()) == 1 })
	h.clock.Advance(100 * time.Millisecond)
	_ = sh.Tell(cmsg{N: 9})
	eventually(t, "stepped by second core", func() bool { s, _, _, _ := rec.snapshot(); return len(s) == 1 })
}

func TestMailboxFullRefusesAndCounts(t *testing.T) {
	h := newHarness(t)
	cfg := DefaultShellConfig("bounded", "test")
	cfg.MailboxCapacity = 3
	sh, rec, _ := spawnCounter(t, h, cfg, 1000)
	if err := sh.Tell(cmsg{N: 0, Block: true}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rec.entered: // the core is busy; the mailbox is empty again
	case <-time.After(5 * time.Second):
		t.Fatal("core never started the blocking message")
	}
	for i := 1; i <= 3; i++ {
		if err := sh.Tell(cmsg{N: i}); err != nil {
			t.Fatalf("tell %d within capacity: %v", i, err)
		}
	}
	if err := sh.Tell(cmsg{N: 4}); !errors.Is(err, ErrMailboxFull) {
		t.Fatalf("tell beyond capacity: %v", err)
	}
	if err := sh.Tell(cmsg{N: 5}); !errors.Is(err, ErrMailboxFull) {
		t.Fatalf("tell beyond capacity: %v", err)
	}
	if got := testutil.ToFloat64(h.sys.metrics.dropped.WithLabelValues("bounded")); got != 2 {
		t.Fatalf("dropped metric %v, want 2", got)
	}
	if sh.Queued() != 3 {
		t.Fatalf("queued %d", sh.Queued())
	}
	close(rec.gate)
	eventually(t, "drained", func() bool { s, _, _, _ := rec.snapshot(); return len(s) == 4 })
	steps, _, _, _ := rec.snapshot()
	if fmt.Sprint(steps) != "[0 1 2 3]" {
		t.Fatalf("steps %v: refused messages must not arrive", steps)
	}
	eventually(t, "capacity released", func() bool { return sh.Queued() == 0 })
	if err := sh.Tell(cmsg{N: 6}); err != nil {
		t.Fatalf("tell after drain: %v", err)
	}
	if got := h.logs.count("mailbox full"); got != 1 {
		t.Fatalf("mailbox-full warnings: %d, want 1 (rate-limited)", got)
	}
}

func TestStopDrainsAcceptedMessages(t *testing.T) {
	h := newHarness(t)
	sh, rec, _ := spawnCounter(t, h, DefaultShellConfig("drain", "test"), 1000)
	for i := range 100 {
		_ = sh.Tell(cmsg{N: i})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := sh.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if s, _, _, _ := rec.snapshot(); len(s) != 100 {
		t.Fatalf("stepped %d of 100 accepted messages before stopping", len(s))
	}
	if err := sh.Tell(cmsg{}); !errors.Is(err, ErrStopped) {
		t.Fatalf("tell after stop: %v", err)
	}
	if err := sh.Stop(ctx); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	// The name is free again.
	sh2, _, _ := spawnCounter(t, h, DefaultShellConfig("drain", "test"), 1000)
	if err := sh2.Tell(cmsg{}); err != nil {
		t.Fatal(err)
	}
}

func TestStopDuringBackoff(t *testing.T) {
	h := newHarness(t)
	cfg := DefaultShellConfig("stopbackoff", "test")
	cfg.Supervision = supCfg()
	sh, _, _ := spawnCounter(t, h, cfg, 1000)
	_ = sh.Tell(cmsg{Panic: true})
	eventually(t, "restart scheduled", func() bool { return len(h.clock.Pending()) == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := sh.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if len(h.clock.Pending()) != 0 {
		t.Fatal("pending restart not cancelled")
	}
	if sh.Incarnations() != 1 {
		t.Fatal("restarted while stopping")
	}
}

func TestSendErrorsAreCountedNotFatal(t *testing.T) {
	h := newHarness(t)
	rec := newRecorder()
	snd := &sendRec{fail: errors.New("bus down")}
	sh, err := Spawn(h.sys, DefaultShellConfig("sendfail", "test"), counterFactory(rec, 1), Sender[cout](snd))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		_ = sh.Tell(cmsg{N: i})
	}
	eventually(t, "steps", func() bool { s, _, _, _ := rec.snapshot(); return len(s) == 5 })
	eventually(t, "send errors counted", func() bool {
		return testutil.ToFloat64(h.sys.metrics.sendErr.WithLabelValues("sendfail")) == 5
	})
	if sh.Incarnations() != 1 {
		t.Fatal("send error restarted the actor")
	}
}

func TestMetricEffectsReachSink(t *testing.T) {
	h := newHarness(t)
	sink, err := NewPromSink(h.reg, MetricDef{Name: "asyncrl_test_steps_total", Help: "steps", Kind: CounterAdd})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultShellConfig("metered", "test")
	cfg.Metrics = sink
	sh, rec, _ := spawnCounter(t, h, cfg, 1000)
	for i := range 7 {
		_ = sh.Tell(cmsg{N: i})
	}
	eventually(t, "steps", func() bool { s, _, _, _ := rec.snapshot(); return len(s) == 7 })
	eventually(t, "metric", func() bool {
		return testutil.ToFloat64(sink.byName["asyncrl_test_steps_total"].counter.WithLabelValues()) == 7
	})
}

func TestSpawnValidation(t *testing.T) {
	h := newHarness(t)
	rec := newRecorder()
	bad := []func(*ShellConfig){
		func(c *ShellConfig) { c.Name = "" },
		func(c *ShellConfig) { c.MailboxCapacity = -1 },
		func(c *ShellConfig) { c.Supervision.Multiplier = 0.5 },
		func(c *ShellConfig) { c.Supervision.Jitter = 2 },
		func(c *ShellConfig) { c.Supervision.MaxFailures = 0 },
		func(c *ShellConfig) { c.Supervision.Window = 0 },
		func(c *ShellConfig) { c.Supervision.MaxBackoff = time.Millisecond },
	}
	for i, mut := range bad {
		cfg := DefaultShellConfig("v", "test")
		mut(&cfg)
		if _, err := Spawn(h.sys, cfg, counterFactory(rec, 1), nil); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("case %d: got %v, want ErrInvalidConfig", i, err)
		}
	}
	if _, err := Spawn(h.sys, DefaultShellConfig("dup", "test"), counterFactory(rec, 1), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Spawn(h.sys, DefaultShellConfig("dup", "test"), counterFactory(rec, 1), nil); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("duplicate name: %v", err)
	}
}

func TestShutdownStopsEverything(t *testing.T) {
	h := newHarness(t)
	var shells []*Shell[cmsg, cout]
	for i := range 5 {
		sh, _, _ := spawnCounter(t, h, DefaultShellConfig(fmt.Sprintf("a%d", i), "test"), 1)
		_ = sh.Tell(cmsg{N: i}) // arms a flush timer in each
		shells = append(shells, sh)
	}
	eventually(t, "timers armed", func() bool { return len(h.clock.Pending()) == 5 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.sys.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for _, sh := range shells {
		select {
		case <-sh.Done():
		default:
			t.Fatalf("%s still running", sh.Name())
		}
	}
	if len(h.clock.Pending()) != 0 {
		t.Fatal("timers survived shutdown")
	}
	if _, err := Spawn(h.sys, DefaultShellConfig("late", "test"), counterFactory(newRecorder(), 1), nil); !errors.Is(err, ErrStopped) {
		t.Fatalf("spawn after shutdown: %v", err)
	}
}

func TestEveryAcceptedMessageIsSteppedDespiteConcurrentStop(t *testing.T) {
	h := newHarness(t)
	cfg := DefaultShellConfig("race-stop", "test")
	cfg.MailboxCapacity = 0 // unbounded: only Stop may refuse
	sh, rec, _ := spawnCounter(t, h, cfg, 1<<30)
	var wg sync.WaitGroup
	accepted := make([][]int, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20_000 { // bounded so a slow race build stays quick
				n := g*1_000_000 + i
				if err := sh.Tell(cmsg{N: n}); err != nil {
					if !errors.Is(err, ErrStopped) {
						t.Errorf("tell: %v", err)
					}
					return
				}
				accepted[g] = append(accepted[g], n)
			}
		}()
	}
	eventually(t, "some traffic", func() bool { s, _, _, _ := rec.snapshot(); return len(s) > 200 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sh.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	steps, _, _, _ := rec.snapshot()
	stepped := make(map[int]bool, len(steps))
	for _, n := range steps {
		stepped[n] = true
	}
	total := 0
	for _, acc := range accepted {
		total += len(acc)
		for _, n := range acc {
			if !stepped[n] {
				t.Fatalf("accepted message %d was never stepped", n)
			}
		}
	}
	if total != len(steps) {
		t.Fatalf("accepted %d, stepped %d", total, len(steps))
	}
}
