package ledger_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/cluster/lease"
	"github.com/asyncrl/asyncrl/cluster/lease/contender"
	"github.com/asyncrl/asyncrl/cluster/ledger"
)

// A trainer that pauses past its lease is replaced; the new holder claims
// the progress with its newer token and the old one's late write — made
// before it noticed anything — is rejected.
func TestDeposedTrainerLateWriteIsFenced(t *testing.T) {
	b := connect(t, t.TempDir())
	defer b.Close()
	l := open(t, b)
	ctx := context.Background()
	tm := contender.Timing{TTL: 600 * time.Millisecond, RenewInterval: 100 * time.Millisecond, Margin: 60 * time.Millisecond,
		RetryMin: 25 * time.Millisecond, RetryMax: 100 * time.Millisecond}
	elector := func(holder string) *lease.Elector {
		cfg := lease.DefaultConfig("run1-trainer", holder)
		cfg.Timing = tm
		e, err := lease.New(ctx, b.Conn(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	a, bb := elector("a"), elector("b")

	a.Tick(ctx)
	tokA, err := a.Token()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Claim(ctx, tokA, "a"); err != nil {
		t.Fatal(err)
	}
	if err := l.SaveProgress(ctx, ledger.Progress{Step: 1, Version: 1, Token: tokA, Holder: "a"}); err != nil {
		t.Fatal(err)
	}

	// a stalls; b keeps trying until a's lease expires on the server.
	deadline := time.Now().Add(5 * time.Second)
	for !bb.Status().Leader {
		if time.Now().After(deadline) {
			t.Fatal("b never acquired the expired lease")
		}
		_, next := bb.Tick(ctx)
		time.Sleep(max(time.Until(next), time.Millisecond))
	}
	tokB, _ := bb.Token()
	p, err := l.Claim(ctx, tokB, "b")
	if err != nil || p.Step != 1 {
		t.Fatalf("b's claim: %+v %v, want to resume at step 1", p, err)
	}
	// a wakes and, before looking at its lease, finishes step 2.
	if err := l.SaveProgress(ctx, ledger.Progress{Step: 2, Version: 2, Token: tokA, Holder: "a"}); !errors.Is(err, contender.ErrFenced) {
		t.Fatalf("deposed trainer's late write: %v, want contender.ErrFenced", err)
	}
	if err := l.SaveProgress(ctx, ledger.Progress{Step: 2, Version: 2, Token: tokB, Holder: "b"}); err != nil {
		t.Fatalf("new holder's write: %v", err)
	}
	if st, _ := a.Tick(ctx); st.Leader {
		t.Fatal("a still leads after b took over")
	}
}
