package retry

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestDoRetriesUntilSuccess(t *testing.T) {
	n := 0
	err := Do(context.Background(), time.Minute, func() error {
		n++
		if n < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("err %v after %d calls; want nil after 3", err, n)
	}
}

func TestDoStopsAtPermanentAndReturnsTheCause(t *testing.T) {
	cause := errors.New("bad")
	n := 0
	err := Do(context.Background(), time.Minute, func() error { n++; return Permanent(cause) })
	if n != 1 || err != cause {
		t.Fatalf("err %v after %d calls; want the cause after 1", err, n)
	}
}

func TestDoGivesUpWhenCtxEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	last := errors.New("still failing")
	if err := Do(ctx, time.Minute, func() error { return last }); err != last {
		t.Fatalf("err %v; want the last error", err)
	}
}

// After runs f only once ready succeeded, on every try; ready's
// Permanent error ends Do without a call of f.
func TestAfterGatesEachTryOnReady(t *testing.T) {
	readies, calls := 0, 0
	ready := func() error {
		readies++
		if readies < 3 {
			return errors.New("no leader yet")
		}
		return nil
	}
	f := func() error {
		calls++
		if calls < 2 {
			return errors.New("lost")
		}
		return nil
	}
	if err := Do(context.Background(), time.Minute, After(ready, f)); err != nil || readies != 4 || calls != 2 {
		t.Fatalf("err %v after %d asks and %d calls; want nil after 4 asks and 2 calls", err, readies, calls)
	}
	cause := errors.New("closed")
	calls = 0
	err := Do(context.Background(), time.Minute, After(func() error { return Permanent(cause) }, f))
	if err != cause || calls != 0 {
		t.Fatalf("err %v after %d calls; want the permanent cause and no call", err, calls)
	}
}
