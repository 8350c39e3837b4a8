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
