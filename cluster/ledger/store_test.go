package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/asyncrl/asyncrl/cluster/lease/contender"
	"github.com/asyncrl/asyncrl/cluster/ledger"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func connect(t testing.TB, dir string) *natsbus.Bus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o := natsbus.DefaultOptions()
	o.StoreDir = dir
	b, err := natsbus.Connect(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func open(t testing.TB, b *natsbus.Bus) *ledger.Ledger {
	t.Helper()
	l, err := ledger.Open(context.Background(), b.Conn(), ledger.DefaultConfig("run1"))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func rec(prompt string, s messages.LedgerState, attempt int32) messages.PromptLedger {
	return messages.PromptLedger{Header: messages.Header{RunID: "run1", Sender: "test"}, PromptID: prompt,
		GroupID: fmt.Sprintf("%s-a%d", prompt, attempt), State: s, Attempt: attempt}
}

func mustRecord(t *testing.T, l *ledger.Ledger, ev messages.PromptLedger) {
	t.Helper()
	if _, _, err := l.Record(context.Background(), ev); err != nil {
		t.Fatalf("Record(%v): %v", ev, err)
	}
}

func TestRecordValidatesAgainstStoredState(t *testing.T) {
	b := connect(t, t.TempDir())
	defer b.Close()
	l := open(t, b)
	ctx := context.Background()
	if es, err := l.Entries(ctx); err != nil || len(es) != 0 {
		t.Fatalf("empty ledger: %v %v", es, err)
	}
	mustRecord(t, l, rec("p/1 with spaces", messages.LedgerConsumed, 0))
	mustRecord(t, l, rec("p/1 with spaces", messages.LedgerTrained, 0))
	if _, _, err := l.Record(ctx, rec("p/1 with spaces", messages.LedgerTrained, 1)); !errors.Is(err, ledger.ErrAlreadyTrained) {
		t.Fatalf("second train: %v, want ErrAlreadyTrained", err)
	}
	if _, out, err := l.Record(ctx, rec("p/1 with spaces", messages.LedgerTrained, 0)); err != nil || out != ledger.Duplicate {
		t.Fatalf("replayed train: %v %v, want Duplicate", out, err)
	}
	if _, _, err := l.Record(ctx, rec("p2", messages.LedgerTrained, 0)); !errors.Is(err, ledger.ErrNotInFlight) {
		t.Fatalf("train unconsumed: %v, want ErrNotInFlight", err)
	}
	if _, ok, _ := l.Get(ctx, "p2"); ok {
		t.Fatal("an illegal first transition was stored")
	}
	e, ok, err := l.Get(ctx, "p/1 with spaces")
	if err != nil || !ok || e.State != messages.LedgerTrained {
		t.Fatalf("Get: %v %v %v", e, ok, err)
	}
}

func TestConcurrentWritersCannotBothSettle(t *testing.T) {
	b := connect(t, t.TempDir())
	defer b.Close()
	l := open(t, b)
	mustRecord(t, l, rec("p", messages.LedgerConsumed, 0))
	// Eight writers race to settle the same attempt differently: exactly one
	// wins, the others find the prompt settled.
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := messages.LedgerTrained
			if i%2 == 1 {
				s = messages.LedgerRequeued
			}
			e := rec("p", s, 0)
			e.Sender = fmt.Sprint("w", i)
			e.Step = int64(i)
			_, out, err := l.Record(context.Background(), e)
			if err == nil && out == ledger.Applied {
				mu.Lock()
				wins++
				mu.Unlock()
			} else if err != nil && !errors.Is(err, ledger.ErrIllegalTransition) {
				t.Errorf("writer %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d writers settled the same attempt, want 1", wins)
	}
}

func TestFencedProgress(t *testing.T) {
	b := connect(t, t.TempDir())
	defer b.Close()
	l := open(t, b)
	ctx := context.Background()
	if _, ok, _ := l.Progress(ctx); ok {
		t.Fatal("progress before any write")
	}
	if _, err := l.Claim(ctx, 5, "a"); err != nil {
		t.Fatal(err)
	}
	if err := l.SaveProgress(ctx, ledger.Progress{Step: 1, Version: 1, Token: 5, Holder: "a"}); err != nil {
		t.Fatal(err)
	}
	// b wins the lease with token 9 and claims: a's late write is refused.
	p, err := l.Claim(ctx, 9, "b")
	if err != nil || p.Step != 1 {
		t.Fatalf("claim by b: %+v %v, want to resume from step 1", p, err)
	}
	if err := l.SaveProgress(ctx, ledger.Progress{Step: 2, Version: 2, Token: 5, Holder: "a"}); !errors.Is(err, contender.ErrFenced) {
		t.Fatalf("deposed holder's write: %v, want contender.ErrFenced", err)
	}
	if _, err := l.Claim(ctx, 5, "a"); !errors.Is(err, contender.ErrFenced) {
		t.Fatalf("deposed holder's claim: %v, want contender.ErrFenced", err)
	}
	if err := l.SaveProgress(ctx, ledger.Progress{Step: 0, Version: 1, Token: 9, Holder: "b"}); !errors.Is(err, ledger.ErrStepRegression) {
		t.Fatalf("step going backwards: %v, want ErrStepRegression", err)
	}
	want := ledger.Progress{Step: 2, Version: 2, Token: 9, Holder: "b", Checkpoint: "/ckpt/2",
		Prompts: []ledger.PromptAttempt{{PromptID: "t9/p1", GroupID: "g1", Attempt: 1}}}
	if err := l.SaveProgress(ctx, want); err != nil {
		t.Fatal(err)
	}
	p, _, _ = l.Progress(ctx)
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("stored progress %+v, want %+v", p, want)
	}
}

func TestGroupBufferAcksOnlyHandledGroupsAndDropsDuplicates(t *testing.T) {
	b := connect(t, t.TempDir())
	defer b.Close()
	l := open(t, b)
	ctx := context.Background()
	for i := range 3 {
		if _, dup, err := l.AppendGroup(ctx, fmt.Sprint("g", i), []byte(fmt.Sprint("data", i))); err != nil || dup {
			t.Fatalf("append g%d: dup=%v %v", i, dup, err)
		}
	}
	if _, dup, err := l.AppendGroup(ctx, "g1", []byte("again")); err != nil || !dup {
		t.Fatalf("re-append g1: dup=%v %v, want a duplicate", dup, err)
	}
	if n, _ := l.StoredGroups(ctx); n != 3 {
		t.Fatalf("stored %d groups, want 3", n)
	}
	var mu sync.Mutex
	var seen []string
	failOnce := true
	c, err := l.ConsumeGroups(ctx, "trainer", 200*time.Millisecond, func(g ledger.GroupMsg) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, fmt.Sprintf("%s:%s:%d", g.GroupID, g.Data, g.Delivered))
		if g.GroupID == "g1" && failOnce {
			failOnce = false
			return errors.New("trainer busy")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n >= 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deliveries %v", seen)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.Stop()
	want := []string{"g0:data0:1", "g1:data1:1", "g1:data1:2", "g2:data2:1"}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("deliveries %v, want %v (in order, the failed one again)", seen, want)
	}
	if n, err := l.PendingGroups(ctx, "trainer"); err != nil || n != 0 {
		t.Fatalf("pending %d %v, want 0", n, err)
	}
}

func TestSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	b := connect(t, dir)
	l := open(t, b)
	mustRecord(t, l, rec("a", messages.LedgerConsumed, 0))
	mustRecord(t, l, rec("a", messages.LedgerTrained, 0))
	mustRecord(t, l, rec("b", messages.LedgerConsumed, 0))
	mustRecord(t, l, rec("b", messages.LedgerRequeued, 0))
	mustRecord(t, l, rec("b", messages.LedgerConsumed, 1))
	mustRecord(t, l, rec("c", messages.LedgerConsumed, 0))
	mustRecord(t, l, rec("c", messages.LedgerFiltered, 0))
	if _, err := l.Claim(ctx, 4, "n1"); err != nil {
		t.Fatal(err)
	}
	if err := l.SaveProgress(ctx, ledger.Progress{Step: 7, Version: 7, Token: 4, Holder: "n1", Checkpoint: "s3://b/7"}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, _, err := l.AppendGroup(ctx, fmt.Sprint("g", i), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// The trainer consumes g0 before the crash.
	got := make(chan string, 8)
	c, err := l.ConsumeGroups(ctx, "trainer", time.Second, func(g ledger.GroupMsg) error {
		if g.GroupID != "g0" {
			return errors.New("crash before g1 is trained")
		}
		got <- g.GroupID
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	<-got
	c.Stop()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b = connect(t, dir)
	defer b.Close()
	l = open(t, b)
	es, err := l.Entries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var states []string
	for _, e := range es {
		states = append(states, fmt.Sprintf("%s:%s:%d", e.PromptID, e.State, e.Attempt))
	}
	if want := "[a:trained:0 b:consumed:1 c:filtered:0]"; fmt.Sprint(states) != want {
		t.Fatalf("entries after restart %v, want %s", states, want)
	}
	if _, _, err := l.Record(ctx, rec("a", messages.LedgerTrained, 1)); !errors.Is(err, ledger.ErrAlreadyTrained) {
		t.Fatalf("training a prompt again after restart: %v, want ErrAlreadyTrained", err)
	}
	p, ok, err := l.Progress(ctx)
	if err != nil || !ok || p.Step != 7 || p.Token != 4 || p.Checkpoint != "s3://b/7" {
		t.Fatalf("progress after restart %+v %v %v", p, ok, err)
	}
	if err := l.SaveProgress(ctx, ledger.Progress{Step: 8, Version: 8, Token: 3}); !errors.Is(err, contender.ErrFenced) {
		t.Fatalf("older token after restart: %v, want ErrFenced", err)
	}
	// g1 and g2 were never acked: they come again, g0 does not.
	c, err = l.ConsumeGroups(ctx, "trainer", time.Second, func(g ledger.GroupMsg) error {
		got <- g.GroupID
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	for _, want := range []string{"g1", "g2"} {
		select {
		case g := <-got:
			if g != want {
				t.Fatalf("after restart got %s, want %s", g, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("waiting for %s after restart", want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []func(*ledger.Config){
		func(c *ledger.Config) { c.Run = "a.b" },
		func(c *ledger.Config) { c.Replicas = 0 },
		func(c *ledger.Config) { c.GroupSubject = "a.*" },
		func(c *ledger.Config) { c.DuplicateWindow = 0 },
		func(c *ledger.Config) { c.CASRetries = 0 },
	}
	for i, mut := range bad {
		c := ledger.DefaultConfig("r")
		mut(&c)
		if err := c.Validate(); !errors.Is(err, ledger.ErrBadConfig) {
			t.Errorf("case %d: %v, want ErrBadConfig", i, err)
		}
	}
	if err := ledger.DefaultConfig("r").Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestRequeueNodeRequeuesOnlyItsInFlightPrompts(t *testing.T) {
	b := connect(t, t.TempDir())
	defer b.Close()
	l := open(t, b)
	ctx := context.Background()
	by := func(node string, ev messages.PromptLedger) messages.PromptLedger { ev.Sender = node; return ev }
	mustRecord(t, l, by("n1", rec("p1", messages.LedgerConsumed, 0)))
	mustRecord(t, l, by("n1", rec("p2", messages.LedgerConsumed, 0)))
	mustRecord(t, l, by("n1", rec("p2", messages.LedgerTrained, 0)))
	mustRecord(t, l, by("n2", rec("p3", messages.LedgerConsumed, 0)))
	mustRecord(t, l, by("n1", rec("p4", messages.LedgerConsumed, 0)))
	got, err := l.RequeueNode(ctx, "n1", "n2")
	if err != nil {
		t.Fatal(err)
	}
	if s := fmt.Sprint(statesOf(got)); s != "[p1:requeued p4:requeued]" {
		t.Fatalf("requeued %s, want p1 and p4", s)
	}
	es, _ := l.Entries(ctx)
	if s := fmt.Sprint(statesOf(es)); s != "[p1:requeued p2:trained p3:consumed p4:requeued]" {
		t.Fatalf("ledger %s", s)
	}
	// Nothing is left in flight on n1, so a second sweep does nothing, and
	// the requeued prompts can be consumed again under a new attempt.
	if again, err := l.RequeueNode(ctx, "n1", "n2"); err != nil || len(again) != 0 {
		t.Fatalf("second sweep: %v %v", again, err)
	}
	mustRecord(t, l, by("n3", rec("p1", messages.LedgerConsumed, 1)))
}

// The failover gap: n0 (term 4) dies with p1 and p2 in flight; n2 claims
// (term 6) and dies before it requeues them, so the progress names n2.
// Requeuing n2's prompts alone leaves n0's in flight; the next claimer
// requeues every in-flight prompt an older term consumed, whoever held
// it, and leaves the rest alone (a settled prompt, its own term's).
func TestRequeueInFlightTakesEveryOlderTerm(t *testing.T) {
	b := connect(t, t.TempDir())
	defer b.Close()
	l := open(t, b)
	ctx := context.Background()
	by := func(node string, ev messages.PromptLedger) messages.PromptLedger { ev.Sender = node; return ev }
	mustRecord(t, l, by("n0", rec("t4/p1", messages.LedgerConsumed, 0)))
	mustRecord(t, l, by("n0", rec("t4/p2", messages.LedgerConsumed, 0)))
	mustRecord(t, l, by("n0", rec("t4/p3", messages.LedgerConsumed, 0)))
	mustRecord(t, l, by("n0", rec("t4/p3", messages.LedgerTrained, 0)))
	mustRecord(t, l, by("n1", rec("t7/p1", messages.LedgerConsumed, 0)))
	if got, err := l.RequeueNode(ctx, "n2", "n1"); err != nil || len(got) != 0 {
		t.Fatalf("requeue of the dead claimer n2: %v %v, want nothing (it held nothing)", statesOf(got), err)
	}
	older := func(e ledger.Entry) bool { return !strings.HasPrefix(e.PromptID, "t7/") }
	got, err := l.RequeueInFlight(ctx, "n1", older)
	if err != nil {
		t.Fatal(err)
	}
	if s := fmt.Sprint(statesOf(got)); s != "[t4/p1:requeued t4/p2:requeued]" {
		t.Fatalf("requeued %s, want n0's t4/p1 and t4/p2", s)
	}
	es, _ := l.Entries(ctx)
	if s := fmt.Sprint(statesOf(es)); s != "[t4/p1:requeued t4/p2:requeued t4/p3:trained t7/p1:consumed]" {
		t.Fatalf("ledger %s", s)
	}
	for _, e := range es {
		if e.State == messages.LedgerRequeued && e.Sender != "n1" {
			t.Errorf("%s requeued by %q, want the claimer n1", e.PromptID, e.Sender)
		}
	}
	if again, err := l.RequeueInFlight(ctx, "n1", older); err != nil || len(again) != 0 {
		t.Fatalf("second sweep: %v %v", statesOf(again), err)
	}
}
