package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/asyncrl/asyncrl/cluster/lease"
	"github.com/asyncrl/asyncrl/cluster/lease/contender"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func startBus(t *testing.T) *natsbus.Bus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := natsbus.Connect(ctx, natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func timing() contender.Timing {
	return contender.Timing{TTL: time.Second, RenewInterval: 200 * time.Millisecond, Margin: 100 * time.Millisecond,
		RetryMin: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond}
}

func newElector(t *testing.T, b *natsbus.Bus, holder string, onChange func(contender.Status)) *lease.Elector {
	t.Helper()
	cfg := lease.DefaultConfig("trainer", holder)
	cfg.Timing = timing()
	cfg.OnChange = onChange
	e, err := lease.New(context.Background(), b.Conn(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type runner struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func run(e *lease.Elector) *runner {
	ctx, cancel := context.WithCancel(context.Background())
	r := &runner{cancel: cancel, done: make(chan struct{})}
	go func() { defer close(r.done); _ = e.Run(ctx) }()
	return r
}

func (r *runner) stop() { r.cancel(); <-r.done }

func leaders(es []*lease.Elector) []int {
	var out []int
	for i, e := range es {
		if e.Status().Leader {
			out = append(out, i)
		}
	}
	return out
}

func TestExactlyOneHolderAmongThree(t *testing.T) {
	b := startBus(t)
	var es []*lease.Elector
	var rs []*runner
	for i := range 3 {
		e := newElector(t, b, fmt.Sprintf("node-%d", i), nil)
		es = append(es, e)
		rs = append(rs, run(e))
	}
	defer func() {
		for _, r := range rs {
			r.stop()
		}
	}()
	waitFor(t, 5*time.Second, "a leader", func() bool { return len(leaders(es)) == 1 })
	// Over several renewal rounds there is never more than one holder, and
	// it stays the same one (renewals keep it).
	first := leaders(es)[0]
	for range 50 {
		if l := leaders(es); len(l) > 1 || (len(l) == 1 && l[0] != first) {
			t.Fatalf("leaders %v, want only %d", l, first)
		}
		time.Sleep(20 * time.Millisecond)
	}
	h, ok, err := es[0].Holder(context.Background())
	if err != nil || !ok {
		t.Fatalf("Holder: %v %v", ok, err)
	}
	if want := fmt.Sprintf("node-%d", first); h.Holder != want || h.Token != es[first].Status().Token {
		t.Fatalf("key says %+v, want holder %s token %d", h, want, es[first].Status().Token)
	}
}

func TestStandbyTakesOverWithinTTLPlusRenewInterval(t *testing.T) {
	b := startBus(t)
	a := newElector(t, b, "a", nil)
	// a acquires by hand, then stops renewing (as if killed -9: no resign).
	before := time.Now()
	a.Tick(context.Background())
	if !a.Status().Leader {
		t.Fatal("a did not acquire a free lease")
	}
	stoppedAt := time.Now()
	tokenA := a.Status().Token

	var mu sync.Mutex
	var wonAt time.Time
	sb := newElector(t, b, "b", func(st contender.Status) {
		mu.Lock()
		defer mu.Unlock()
		if st.Leader && wonAt.IsZero() {
			wonAt = time.Now()
		}
	})
	r := run(sb)
	defer r.stop()
	tm := timing()
	// The bound from the design: TTL + RenewInterval, plus the server's
	// expiry timer (it checks MaxAge at most every 250ms on a coarse clock)
	// and scheduling slack on a loaded 2-core CI machine.
	bound := tm.TTL + tm.RenewInterval
	const slack = 750 * time.Millisecond
	waitFor(t, bound+slack, "the standby to take over", func() bool { return sb.Status().Leader })
	mu.Lock()
	took, sinceWrite := wonAt.Sub(stoppedAt), wonAt.Sub(before)
	mu.Unlock()
	t.Logf("takeover after %s (bound %s)", took, bound)
	if sinceWrite < tm.TTL-tm.Margin {
		t.Fatalf("standby acquired %s after the holder's write, before its lease could expire (TTL %s)", sinceWrite, tm.TTL)
	}
	if tok := sb.Status().Token; tok <= tokenA {
		t.Fatalf("new token %d not above the old one %d", tok, tokenA)
	}
}

func TestPausedHolderLearnsItLost(t *testing.T) {
	b := startBus(t)
	var mu sync.Mutex
	var changes []contender.Status
	a := newElector(t, b, "a", func(st contender.Status) {
		mu.Lock()
		defer mu.Unlock()
		changes = append(changes, st)
	})
	a.Tick(context.Background())
	if !a.Status().Leader {
		t.Fatal("a did not acquire")
	}
	tokenA := a.Status().Token
	// a is paused (GC, SIGSTOP): it makes no call while b takes over.
	bb := newElector(t, b, "b", nil)
	r := run(bb)
	defer r.stop()
	waitFor(t, 5*time.Second, "b to take over", func() bool { return bb.Status().Leader })
	// a wakes: its local deadline passed, so it already knows it is not the
	// leader, and its attempt to get the lease back is refused.
	if a.Status().Leader {
		t.Fatal("a still believes it leads after its deadline")
	}
	st, _ := a.Tick(context.Background())
	if st.Leader {
		t.Fatal("a regained a lease b holds")
	}
	if _, err := a.Token(); !errors.Is(err, lease.ErrNotLeader) {
		t.Fatalf("a.Token() err = %v, want ErrNotLeader", err)
	}
	// Its fencing token is now older than b's, so stores reject its writes.
	if err := contender.CheckFence(bb.Status().Token, tokenA); !errors.Is(err, contender.ErrFenced) {
		t.Fatalf("a's token %d vs b's %d: %v, want ErrFenced", tokenA, bb.Status().Token, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(changes) != 2 || !changes[0].Leader || changes[1].Leader {
		t.Fatalf("a's OnChange calls %+v, want won then lost", changes)
	}
}

func TestPausedHolderRenewalIsRefused(t *testing.T) {
	// The renewal itself is refused, not only judged lost locally: drive a
	// holder whose renewal is due before its deadline while someone else
	// has rewritten the key.
	b := startBus(t)
	a := newElector(t, b, "a", nil)
	a.Tick(context.Background())
	if !a.Status().Leader {
		t.Fatal("a did not acquire")
	}
	// An operator (or a buggy peer) deletes the key; c acquires at once.
	c := newElector(t, b, "c", nil)
	if err := deleteKey(b, "trainer"); err != nil {
		t.Fatal(err)
	}
	c.Tick(context.Background())
	if !c.Status().Leader {
		t.Fatal("c did not acquire the deleted lease")
	}
	time.Sleep(timing().RenewInterval) // let a's renewal come due (a is still within its deadline)
	st, _ := a.Tick(context.Background())
	if st.Leader {
		t.Fatal("a's renewal at its old revision succeeded while c holds the lease")
	}
	if !c.Status().Leader {
		t.Fatal("c lost the lease")
	}
}

// TestLandedRenewalKeepsTheTerm: a renewal that timed out on the holder's
// side but was applied by the server (the key moved on, still holding
// the holder's term) does not end the term: the next renewal is refused
// at the old revision, the holder sees its own term in the key, renews at
// the key's revision and stays leader throughout. Under delay and loss
// (make test-netns's netem scenario) this happened several times a run,
// each ending a healthy term. A key rewritten by anyone else still loses
// (TestPausedHolderRenewalIsRefused).
func TestLandedRenewalKeepsTheTerm(t *testing.T) {
	b := startBus(t)
	var mu sync.Mutex
	var changes []contender.Status
	a := newElector(t, b, "a", func(s contender.Status) { mu.Lock(); changes = append(changes, s); mu.Unlock() })
	st, _ := a.Tick(context.Background())
	if !st.Leader {
		t.Fatal("a did not acquire")
	}
	time.Sleep(timing().RenewInterval)
	if st, _ = a.Tick(context.Background()); !st.Leader { // records the token in the key
		t.Fatal("a's first renewal failed")
	}
	// a's next renewal, as the server applies it after a's call gave up.
	landed, err := rewriteKey(b, "trainer", st.Revision, fmt.Sprintf(`{"holder":"a","token":%d}`, st.Token))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(timing().RenewInterval)
	st2, next := a.Tick(context.Background()) // refused at the old revision: resyncs
	if !st2.Leader || st2.Revision != landed || st2.Token != st.Token {
		t.Fatalf("after the refused renewal: %+v, want leader at revision %d with token %d", st2, landed, st.Token)
	}
	if time.Until(next) > 0 {
		t.Fatalf("the renewal at the landed revision waits %s, want now", time.Until(next))
	}
	st3, _ := a.Tick(context.Background())
	if !st3.Leader || st3.Revision <= landed {
		t.Fatalf("renewal at the landed revision: %+v, want leader past revision %d", st3, landed)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(changes) != 1 || !changes[0].Leader {
		t.Fatalf("leadership changes %+v, want only the first acquisition", changes)
	}
}

// TestLandedAcquireIsTakenUp: a Create that timed out on the candidate
// but landed on the server leaves the key holding the candidate's own
// Create. Its retry is refused (the key exists); read as "held by
// someone else", the key would sit unrenewed until its TTL ran out — a
// failover stalled by one TTL. The candidate reads the key, finds its own
// Create, confirms it with a renewal at once and leads with the Create's
// revision as its token, a single renewal later. Someone else's Create
// is still someone else's (TestExactlyOneHolderAmongThree), and so is
// the same node's Create from before it restarted (another instance).
func TestLandedAcquireIsTakenUp(t *testing.T) {
	b := startBus(t)
	var mu sync.Mutex
	var changes []contender.Status
	a := newElector(t, b, "a", func(s contender.Status) { mu.Lock(); changes = append(changes, s); mu.Unlock() })
	// a's Create, as the server applies it after a's call gave up.
	landed, err := createKey(b, "trainer", fmt.Sprintf(`{"holder":"a","instance":%q,"token":0}`, a.Instance()))
	if err != nil {
		t.Fatal(err)
	}
	st, next := a.Tick(context.Background()) // the retry's Create is refused
	if st.Leader {
		t.Fatalf("leader before confirming: %+v", st)
	}
	if time.Until(next) > 0 {
		t.Fatalf("the confirming renewal waits %s, want now", time.Until(next))
	}
	st, _ = a.Tick(context.Background()) // renews at the landed revision
	if !st.Leader || st.Token != landed || st.Revision <= landed {
		t.Fatalf("after the confirming renewal: %+v, want leader with token %d past revision %d", st, landed, landed)
	}
	h, ok, err := a.Holder(context.Background())
	if err != nil || !ok || h.Holder != "a" || h.Token != landed {
		t.Fatalf("key after confirming: %+v ok=%v err=%v, want a's term %d", h, ok, err, landed)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(changes) != 1 || !changes[0].Leader || changes[0].Token != landed {
		t.Fatalf("leadership changes %+v, want one acquisition with token %d", changes, landed)
	}
}

// TestResignWhileConfirmingFreesTheKey: a contender stopped between
// taking up its landed Create and confirming it deletes that Create, so a
// standby acquires at once instead of after a TTL; it reports no change
// (it never reported leadership).
func TestResignWhileConfirmingFreesTheKey(t *testing.T) {
	b := startBus(t)
	changed := 0
	a := newElector(t, b, "a", func(contender.Status) { changed++ })
	if _, err := createKey(b, "trainer", fmt.Sprintf(`{"holder":"a","instance":%q,"token":0}`, a.Instance())); err != nil {
		t.Fatal(err)
	}
	if st, _ := a.Tick(context.Background()); st.Leader { // refused Create, taken up: confirming
		t.Fatalf("leader before confirming: %+v", st)
	}
	if err := a.Resign(context.Background()); err != nil {
		t.Fatalf("resign while confirming: %v, want the landed Create deleted", err)
	}
	if _, ok, err := a.Holder(context.Background()); err != nil || ok {
		t.Fatalf("key after the resign: ok=%v err=%v, want none", ok, err)
	}
	s := newElector(t, b, "s", nil)
	if st, _ := s.Tick(context.Background()); !st.Leader {
		t.Fatalf("a standby did not acquire the freed key at once: %+v", st)
	}
	if changed != 0 {
		t.Fatalf("%d leadership changes reported, want none", changed)
	}
	if err := a.Resign(context.Background()); !errors.Is(err, lease.ErrNotLeader) {
		t.Fatalf("second resign: %v, want ErrNotLeader", err)
	}
}

// TestEarlierLifesCreateIsNotTakenUp: the key holds node a's Create from
// before a restarted (the same Holder, another Instance): the restarted a
// must not take that term up as its own (its token would serve two lives
// of a), so it waits for the key to expire as for anyone else's.
func TestEarlierLifesCreateIsNotTakenUp(t *testing.T) {
	b := startBus(t)
	a := newElector(t, b, "a", nil)
	if _, err := createKey(b, "trainer", `{"holder":"a","instance":"an-earlier-life","token":0}`); err != nil {
		t.Fatal(err)
	}
	st, next := a.Tick(context.Background())
	if st.Leader || time.Until(next) < timing().RenewInterval/2 {
		t.Fatalf("after a refused Create of another life's key: %+v, next in %s; want a follower waiting about a RenewInterval", st, time.Until(next))
	}
	if st, _ = a.Tick(context.Background()); st.Leader {
		t.Fatalf("took up another life's Create: %+v", st)
	}
}

func TestResignHandsOverAtOnce(t *testing.T) {
	b := startBus(t)
	a := newElector(t, b, "a", nil)
	ra := run(a)
	waitFor(t, 5*time.Second, "a to lead", func() bool { return a.Status().Leader })
	bb := newElector(t, b, "b", nil)
	rb := run(bb)
	defer rb.stop()
	ra.stop() // Run resigns on the way out
	if a.Status().Leader {
		t.Fatal("a still leads after Run returned")
	}
	if _, ok, err := bb.Holder(context.Background()); err != nil || (ok && !bb.Status().Leader) {
		// Either the key is gone (b not yet retried) or b holds it.
		t.Fatalf("after resign: ok=%v err=%v", ok, err)
	}
	// b gets it after one RenewInterval, well before the TTL.
	waitFor(t, timing().TTL-timing().Margin, "b to take over after a resigned", func() bool { return bb.Status().Leader })
}

func TestBucketTTLMismatchIsAnError(t *testing.T) {
	b := startBus(t)
	newElector(t, b, "a", nil)
	cfg := lease.DefaultConfig("publisher", "x")
	cfg.Timing = contender.DefaultTiming(5 * time.Second)
	if _, err := lease.New(context.Background(), b.Conn(), cfg); !errors.Is(err, contender.ErrBadConfig) {
		t.Fatalf("second TTL in one bucket: %v, want ErrBadConfig", err)
	}
}

func TestFencingTokensIncreaseAcrossTerms(t *testing.T) {
	b := startBus(t)
	es := []*lease.Elector{newElector(t, b, "a", nil), newElector(t, b, "b", nil), newElector(t, b, "c", nil)}
	ctx := context.Background()
	var tokens []uint64
	for term := range 6 {
		e := es[term%3]
		st, _ := e.Tick(ctx)
		if !st.Leader {
			t.Fatalf("term %d: %d did not acquire the free lease", term, term%3)
		}
		// A renewal keeps the term's token while the revision moves on.
		time.Sleep(timing().RenewInterval)
		if st2, _ := e.Tick(ctx); !st2.Leader || st2.Token != st.Token || st2.Revision <= st.Revision {
			t.Fatalf("term %d renewal: %+v after %+v", term, st2, st)
		}
		tokens = append(tokens, st.Token)
		if err := e.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("tokens %v do not increase", tokens)
		}
	}
}

func TestMetrics(t *testing.T) {
	b := startBus(t)
	reg := prometheus.NewPedanticRegistry()
	mk := func(holder string) *lease.Elector {
		cfg := lease.DefaultConfig("trainer", holder)
		cfg.Timing, cfg.Registerer = timing(), reg
		e, err := lease.New(context.Background(), b.Conn(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	a := mk("a")
	a.Tick(context.Background())
	want := `
# HELP asyncrl_lease_leader 1 while this contender holds the lease of its role, else 0.
# TYPE asyncrl_lease_leader gauge
asyncrl_lease_leader{holder="a",role="trainer"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "asyncrl_lease_leader"); err != nil {
		t.Fatal(err)
	}
	// a pauses; b takes over; a's next tick reports the lost term.
	bb := mk("b")
	r := run(bb)
	defer r.stop()
	waitFor(t, 5*time.Second, "b to take over", func() bool { return bb.Status().Leader })
	a.Tick(context.Background())
	want = `
# HELP asyncrl_lease_leader 1 while this contender holds the lease of its role, else 0.
# TYPE asyncrl_lease_leader gauge
asyncrl_lease_leader{holder="a",role="trainer"} 0
asyncrl_lease_leader{holder="b",role="trainer"} 1
# HELP asyncrl_lease_lost_total Terms that ended other than by resigning (renewal refused or local deadline passed).
# TYPE asyncrl_lease_lost_total counter
asyncrl_lease_lost_total{holder="a",role="trainer"} 1
asyncrl_lease_lost_total{holder="b",role="trainer"} 0
# HELP asyncrl_lease_acquired_total Terms won (leases acquired).
# TYPE asyncrl_lease_acquired_total counter
asyncrl_lease_acquired_total{holder="a",role="trainer"} 1
asyncrl_lease_acquired_total{holder="b",role="trainer"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "asyncrl_lease_leader", "asyncrl_lease_lost_total", "asyncrl_lease_acquired_total"); err != nil {
		t.Fatal(err)
	}
	cfg := lease.DefaultConfig("trainer", "a")
	cfg.Timing, cfg.Registerer = timing(), reg
	if _, err := lease.New(context.Background(), b.Conn(), cfg); !errors.Is(err, contender.ErrBadConfig) {
		t.Fatalf("same role and holder twice on one registry: %v, want ErrBadConfig", err)
	}
}
