package contender

import (
	"errors"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func testTiming() Timing {
	return Timing{TTL: time.Second, RenewInterval: 250 * time.Millisecond, Margin: 100 * time.Millisecond,
		RetryMin: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond}
}

func newTestCore(t *testing.T) *Core {
	t.Helper()
	c, err := NewCore(testTiming())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// self is the contender the tests play.
var self = Holding{Holder: "n1", Instance: "i1"}

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestTimingValidate(t *testing.T) {
	ok := testTiming()
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid timing rejected: %v", err)
	}
	if err := DefaultTiming(3 * time.Second).Validate(); err != nil {
		t.Fatalf("default timing rejected: %v", err)
	}
	bad := map[string]func(*Timing){
		"TTL":           func(t *Timing) { t.TTL = time.Millisecond },
		"Margin":        func(t *Timing) { t.Margin = t.TTL },
		"RenewInterval": func(t *Timing) { t.RenewInterval = t.TTL },
		"RetryMin":      func(t *Timing) { t.RetryMin = 0 },
	}
	for field, mut := range bad {
		tm := testTiming()
		mut(&tm)
		err := tm.Validate()
		if !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: err = %v, want ErrBadConfig", field, err)
		}
	}
}

func TestCoreAcquireRenewCycle(t *testing.T) {
	c := newTestCore(t)
	if op := c.Due(at(0)); op != OpAcquire {
		t.Fatalf("fresh core: op %s, want acquire", op)
	}
	if op := c.Due(at(1)); op != OpNone {
		t.Fatalf("op in flight: got %s, want none", op)
	}
	c.Acquired(7)
	st := c.Status(at(10))
	if !st.Leader || st.Token != 7 || st.Revision != 7 {
		t.Fatalf("after acquire: %+v", st)
	}
	// Deadline counts from the send time: 0 + TTL − Margin = 900ms.
	if want := at(900); !st.Until.Equal(want) {
		t.Fatalf("until = %v, want %v", st.Until, want)
	}
	if op := c.Due(at(249)); op != OpNone {
		t.Fatalf("before RenewInterval: %s", op)
	}
	if op := c.Due(at(250)); op != OpRenew {
		t.Fatalf("at RenewInterval: %s, want renew", op)
	}
	c.Renewed(9)
	st = c.Status(at(260))
	if !st.Leader || st.Token != 7 || st.Revision != 9 || !st.Until.Equal(at(1150)) {
		t.Fatalf("after renew: %+v (token must stay the acquisition revision)", st)
	}
}

func TestCoreTakenWaitsRenewInterval(t *testing.T) {
	c := newTestCore(t)
	c.Due(at(0))
	c.Taken(Holding{Holder: "n2", Token: 2, Revision: 5}, true, self)
	if c.Status(at(1)).Leader {
		t.Fatal("taken lease reported as held")
	}
	if op := c.Due(at(200)); op != OpNone {
		t.Fatalf("retry too early: %s", op)
	}
	if op := c.Due(at(250)); op != OpAcquire {
		t.Fatalf("no retry after RenewInterval: %s", op)
	}
}

func TestCoreRefusedRenewalLosesAtOnce(t *testing.T) {
	c := newTestCore(t)
	c.Due(at(0))
	c.Acquired(3)
	c.Due(at(250))
	c.Lost()
	if st := c.Status(at(251)); st.Leader || st.Token != 3 {
		t.Fatalf("after refused renewal: %+v, want follower with the old token", st)
	}
	if op := c.Due(at(500)); op != OpAcquire {
		t.Fatalf("follower does not contend again: %s", op)
	}
}

func TestCoreTransientFailuresBackOffAndStepDownAtDeadline(t *testing.T) {
	c := newTestCore(t)
	c.Due(at(0))
	c.Acquired(3)
	// Renewals keep failing transiently: 50, 100, 200, 200 ms backoff.
	now := 250
	wantGaps := []int{50, 100, 200, 200}
	for i, gap := range wantGaps {
		if op := c.Due(at(now)); op != OpRenew {
			t.Fatalf("attempt %d at %dms: %s, want renew", i, now, op)
		}
		c.Failed()
		if c.Due(at(now+gap-1)) != OpNone {
			t.Fatalf("attempt %d: retried before %dms backoff", i, gap)
		}
		now += gap
	}
	// now = 800: still before the 900ms deadline.
	if !c.Status(at(899)).Leader {
		t.Fatal("stepped down before the local deadline")
	}
	if !c.Tick(at(900)) {
		t.Fatal("Tick at the deadline did not report stepping down")
	}
	if c.Status(at(900)).Leader {
		t.Fatal("still leader at TTL − Margin after failed renewals")
	}
	if op := c.Due(at(900)); op != OpAcquire {
		t.Fatalf("after stepping down: %s, want acquire", op)
	}
}

// TestCoreLateAnswerAfterDeadlineStaysDown: a renewal answered after the
// local deadline — confirmed (Renewed) or found landed (Resynced) — does
// not revive leadership.
func TestCoreLateAnswerAfterDeadlineStaysDown(t *testing.T) {
	for name, answer := range map[string]func(*Core){
		"renewed":  func(c *Core) { c.Renewed(5) },
		"resynced": func(c *Core) { c.Resynced(4) },
	} {
		c := newTestCore(t)
		c.Due(at(0))
		c.Acquired(3)
		c.Due(at(250))
		if !c.Tick(at(1000)) { // the renewal hung past the deadline
			t.Fatalf("%s: no step-down at the deadline", name)
		}
		answer(c)
		if c.Status(at(1001)).Leader {
			t.Fatalf("%s: an answer after the deadline revived leadership", name)
		}
	}
}

func TestCoreTokensIncrease(t *testing.T) {
	c := newTestCore(t)
	c.Due(at(0))
	c.Acquired(3)
	c.Due(at(250))
	c.Lost()
	c.Due(at(500))
	defer func() {
		if recover() == nil {
			t.Fatal("acquiring at a revision not above the old token did not panic")
		}
	}()
	c.Acquired(2)
}

func TestCoreOutcomeWithoutOpPanics(t *testing.T) {
	c := newTestCore(t)
	defer func() {
		if recover() == nil {
			t.Fatal("Renewed without a renewal in flight did not panic")
		}
	}()
	c.Renewed(1)
}

func TestCheckFence(t *testing.T) {
	cases := []struct {
		stored, token uint64
		ok            bool
	}{{0, 1, true}, {5, 5, true}, {5, 9, true}, {5, 4, false}, {9, 0, false}}
	for _, tc := range cases {
		err := CheckFence(tc.stored, tc.token)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrFenced)) {
			t.Errorf("CheckFence(%d, %d) = %v, want ok=%v", tc.stored, tc.token, err, tc.ok)
		}
	}
}

func TestCoreResignedWaitsBeforeContendingAgain(t *testing.T) {
	c := newTestCore(t)
	c.Due(at(0))
	c.Acquired(3)
	c.Resigned(at(100))
	if c.Status(at(100)).Leader {
		t.Fatal("leader after resigning")
	}
	if op := c.Due(at(349)); op != OpNone {
		t.Fatalf("contends again %s before a RenewInterval passed", op)
	}
	if op := c.Due(at(350)); op != OpAcquire {
		t.Fatalf("after RenewInterval: %s, want acquire", op)
	}
}

// TestCoreResyncedKeepsDeadlineAndRenewsAtOnce: a refused renewal whose
// refusal was our own earlier, timed-out renewal landing keeps the term:
// the core adopts the key's revision, renews at once, and does not move
// its local deadline until a renewal is confirmed.
func TestCoreResyncedKeepsDeadlineAndRenewsAtOnce(t *testing.T) {
	c := newTestCore(t)
	c.Due(at(0))
	c.Acquired(3)
	c.Due(at(250))
	c.Failed() // timed out here; the server applied it as revision 4
	if op := c.Due(at(300)); op != OpRenew || c.Revision() != 3 {
		t.Fatalf("retry: %s at revision %d, want renew at 3", op, c.Revision())
	}
	c.Resynced(4) // refused at 3: the key is at 4 and still ours
	st := c.Status(at(310))
	if !st.Leader || st.Token != 3 || st.Revision != 4 || !st.Until.Equal(at(900)) {
		t.Fatalf("after resync: %+v, want leader, token 3, revision 4, until 900ms (unchanged)", st)
	}
	if op := c.Due(at(310)); op != OpRenew || c.Revision() != 4 {
		t.Fatalf("after resync: %s at revision %d, want renew at 4 at once", op, c.Revision())
	}
	c.Renewed(5)
	if st := c.Status(at(311)); !st.Leader || !st.Until.Equal(at(310+900)) {
		t.Fatalf("after the confirmed renewal: %+v, want until 1210ms", st)
	}
}

func TestCoreResyncedBackwardsPanics(t *testing.T) {
	c := newTestCore(t)
	c.Due(at(0))
	c.Acquired(3)
	c.Due(at(250))
	defer func() {
		if recover() == nil {
			t.Fatal("resync to a revision not above the last written did not panic")
		}
	}()
	c.Resynced(3)
}

// TestJudgeRefusal: after a renewal refused at revision 7 of holder n1's
// term 3, only the key holding that very term past 7 is a landed renewal;
// the same term at 7 or older is a stale read; anything else is lost.
func TestJudgeRefusal(t *testing.T) {
	for _, c := range []struct {
		key   Holding
		found bool
		want  Refusal
	}{
		{Holding{Holder: "n1", Token: 3, Revision: 8}, true, RefusalLanded},
		{Holding{Holder: "n1", Token: 3, Revision: 7}, true, RefusalReadAgain},
		{Holding{Holder: "n1", Token: 3, Revision: 5}, true, RefusalReadAgain},
		{Holding{Holder: "n2", Token: 3, Revision: 8}, true, RefusalLost},
		{Holding{Holder: "n1", Token: 8, Revision: 9}, true, RefusalLost}, // n1 again, a later term
		{Holding{}, false, RefusalLost},
	} {
		if got := JudgeRefusal(c.key, c.found, "n1", 3, 7); got != c.want {
			t.Errorf("JudgeRefusal(%+v, found %v) = %d, want %d", c.key, c.found, got, c.want)
		}
	}
}

// TestJudgeTaken: after a refused Create of holder n1 (instance i1),
// whose newest term had token 3, only this instance's own untokened Create
// (Token == Revision) newer than 3 is a Create of its that landed.
func TestJudgeTaken(t *testing.T) {
	for _, c := range []struct {
		key   Holding
		found bool
		want  Refusal
	}{
		{Holding{Holder: "n1", Instance: "i1", Token: 9, Revision: 9}, true, RefusalLanded},
		{Holding{Holder: "n1", Instance: "i0", Token: 9, Revision: 9}, true, RefusalLost}, // n1 before it restarted
		{Holding{Holder: "n1", Token: 9, Revision: 9}, true, RefusalLost},                 // no instance: not provably its own
		{Holding{Holder: "n1", Instance: "i1", Token: 3, Revision: 3}, true, RefusalLost}, // its old term's Create: never taken up again
		{Holding{Holder: "n1", Instance: "i1", Token: 4, Revision: 6}, true, RefusalLost}, // a renewed term (not its Create)
		{Holding{Holder: "n2", Instance: "i1", Token: 9, Revision: 9}, true, RefusalLost},
		{Holding{}, false, RefusalLost},
	} {
		if got := JudgeTaken(c.key, c.found, self, 3); got != c.want {
			t.Errorf("JudgeTaken(%+v, found %v) = %s, want %s", c.key, c.found, got, c.want)
		}
	}
}

// TestCoreTakenOwnLandedCreateConfirms: an acquire that timed out here
// but landed on the server (the retry's Create is refused, the key holds
// this contender's own Create) is taken up at once: the core renews at
// the Create's revision and leads from the renewal's send time — instead
// of reading the key as someone else's and waiting its TTL out.
func TestCoreTakenOwnLandedCreateConfirms(t *testing.T) {
	c := newTestCore(t)
	c.Due(at(0))
	c.Failed() // the Create timed out here; the server applied it as revision 5
	if op := c.Due(at(50)); op != OpAcquire {
		t.Fatalf("retry: %s, want acquire", op)
	}
	if v := c.Taken(Holding{Holder: "n1", Instance: "i1", Token: 5, Revision: 5}, true, self); v != RefusalLanded {
		t.Fatalf("Taken = %s, want landed", v)
	}
	if st := c.Status(at(60)); st.Leader {
		t.Fatalf("leader before the confirming renewal: %+v", st)
	}
	if rev, ok := c.Resignable(at(60)); !ok || rev != 5 {
		t.Fatalf("Resignable while confirming = %d, %v; want the landed Create's 5 (a stop deletes it)", rev, ok)
	}
	if op := c.Due(at(60)); op != OpRenew || c.Revision() != 5 {
		t.Fatalf("after taking up its own Create: %s at revision %d, want renew at 5 at once", op, c.Revision())
	}
	c.Renewed(6)
	st, changed := c.Changed(at(70))
	if !st.Leader || !changed || st.Token != 5 || st.Revision != 6 || !st.Until.Equal(at(60+900)) {
		t.Fatalf("after the confirming renewal: %+v changed %v, want leader with token 5 at revision 6 until 960ms", st, changed)
	}
}

// TestCoreConfirmingRefusals: a confirming renewal that is refused is
// judged like any renewal: its own landed renewal resyncs (and it keeps
// confirming), anything else sends it back to contending.
func TestCoreConfirmingRefusals(t *testing.T) {
	c := newTestCore(t)
	c.Due(at(0))
	c.Taken(Holding{Holder: "n1", Instance: "i1", Token: 5, Revision: 5}, true, self)
	c.Due(at(0))
	c.Failed() // the confirming renewal timed out; it landed as 6
	c.Due(at(50))
	if v := c.Refused(Holding{Holder: "n1", Token: 5, Revision: 6}, true, "n1"); v != RefusalLanded {
		t.Fatalf("Refused = %s, want landed", v)
	}
	if op := c.Due(at(50)); op != OpRenew || c.Revision() != 6 || c.Status(at(50)).Leader {
		t.Fatalf("after resync: %s at %d, want a confirming renew at 6, not yet leader", op, c.Revision())
	}
	if v := c.Refused(Holding{}, false, "n1"); v != RefusalLost { // expired meanwhile
		t.Fatalf("Refused = %s, want lost", v)
	}
	if op := c.Due(at(299)); op != OpNone {
		t.Fatalf("contends again at once: %s", op)
	}
	if op := c.Due(at(300)); op != OpAcquire {
		t.Fatalf("after RenewInterval: %s, want acquire", op)
	}
}

// TestCoreChangedReportsOnce: leadership is reported once per change,
// and a resign takes the report back.
func TestCoreChangedReportsOnce(t *testing.T) {
	c := newTestCore(t)
	if _, ch := c.Changed(at(0)); ch {
		t.Fatal("a fresh follower reported a change")
	}
	c.Due(at(0))
	c.Acquired(3)
	if st, ch := c.Changed(at(1)); !ch || !st.Leader {
		t.Fatalf("acquisition: %+v changed %v", st, ch)
	}
	if _, ch := c.Changed(at(2)); ch {
		t.Fatal("reported twice")
	}
	if !c.Resigned(at(3)) {
		t.Fatal("Resigned: the reported leadership was not taken back")
	}
	if _, ch := c.Changed(at(4)); ch {
		t.Fatal("a resign the shell reported itself was reported again")
	}
	if c.Resigned(at(5)) {
		t.Fatal("Resigned twice reported a loss twice")
	}
}

func TestEncodeDecode(t *testing.T) {
	h, err := Decode(Encode(Holding{Holder: "n1", Instance: "i1"}), 7)
	if err != nil || h != (Holding{Holder: "n1", Instance: "i1", Token: 7, Revision: 7}) {
		t.Fatalf("an untokened Create: %+v, %v", h, err)
	}
	h, err = Decode([]byte(`{"holder":"n1","token":7}`), 9) // a key written before instances
	if err != nil || h != (Holding{Holder: "n1", Token: 7, Revision: 9}) {
		t.Fatalf("a renewal: %+v, %v", h, err)
	}
	if _, err := Decode([]byte("{"), 1); err == nil {
		t.Fatal("a broken value decoded")
	}
}

// TestCoreResignableOnlyWhatItHolds: nothing to delete before a lease,
// after its deadline passed, or after a resign.
func TestCoreResignableOnlyWhatItHolds(t *testing.T) {
	c := newTestCore(t)
	if _, ok := c.Resignable(at(0)); ok {
		t.Fatal("Resignable before any lease")
	}
	c.Due(at(0))
	c.Acquired(3)
	if rev, ok := c.Resignable(at(10)); !ok || rev != 3 {
		t.Fatalf("Resignable while leading = %d, %v; want 3", rev, ok)
	}
	if _, ok := c.Resignable(at(5000)); ok {
		t.Fatal("Resignable after the local deadline")
	}
	c2 := newTestCore(t)
	c2.Due(at(0))
	c2.Acquired(4)
	c2.Resigned(at(20))
	if _, ok := c2.Resignable(at(30)); ok {
		t.Fatal("Resignable after a resign")
	}
}

// TestCallBudget: a holder's renewal never waits past its local deadline;
// other calls, and a contender without a deadline, get the whole timeout.
func TestCallBudget(t *testing.T) {
	lead := Status{Leader: true, Token: 3, Revision: 4, Until: at(900)}
	for _, tc := range []struct {
		name string
		op   Op
		st   Status
		now  time.Time
		want time.Duration
	}{
		{"renew well before the deadline", OpRenew, lead, at(100), 500 * time.Millisecond},
		{"renew near the deadline", OpRenew, lead, at(700), 200 * time.Millisecond},
		{"renew past the deadline", OpRenew, lead, at(1000), -100 * time.Millisecond},
		{"confirming renewal (no deadline yet)", OpRenew, Status{Token: 5, Revision: 5}, at(700), 500 * time.Millisecond},
		{"acquire", OpAcquire, Status{}, at(700), 500 * time.Millisecond},
	} {
		if got := CallBudget(tc.op, tc.st, tc.now, 500*time.Millisecond); got != tc.want {
			t.Errorf("%s: CallBudget = %s, want %s", tc.name, got, tc.want)
		}
	}
}
