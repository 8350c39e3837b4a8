package front

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/router/upstream"
)

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for " + what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestConnCtxAfterFunc(t *testing.T) {
	c := newConnCtx()
	var slot, over, stopped, late atomic.Int32
	stopSlot := upstream.AfterFunc(c, func() { slot.Add(1) })
	stopOver := upstream.AfterFunc(c, func() { over.Add(1) }) // the slot is taken
	stop3 := upstream.AfterFunc(c, func() { stopped.Add(1) })
	if !stop3() {
		t.Fatal("stopping a registration before the end reports false")
	}
	select {
	case <-c.Done():
		t.Fatal("Done closed before cancel")
	default:
	}
	if c.Err() != nil {
		t.Fatalf("Err = %v before cancel", c.Err())
	}
	c.cancel()
	c.cancel() // idempotent
	<-c.Done()
	if !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("Err = %v, want context.Canceled", c.Err())
	}
	waitFor(t, "the registered functions", func() bool { return slot.Load() == 1 && over.Load() == 1 })
	if stopSlot() || stopOver() {
		t.Fatal("a stop after the function ran reports true")
	}
	upstream.AfterFunc(c, func() { late.Add(1) })
	waitFor(t, "a registration after the end to run", func() bool { return late.Load() == 1 })
	time.Sleep(10 * time.Millisecond)
	if stopped.Load() != 0 || slot.Load() != 1 {
		t.Fatalf("stopped ran %d times, slot %d", stopped.Load(), slot.Load())
	}
}

// The slot is free again once its registration stopped: the upstream
// client's one registration per request allocates nothing.
func TestConnCtxSlotAllocatesNothing(t *testing.T) {
	c := newConnCtx()
	f := func() {}
	if n := testing.AllocsPerRun(100, func() { upstream.AfterFunc(c, f)() }); n != 0 {
		t.Fatalf("a registration and its stop allocate %v times", n)
	}
	var ran atomic.Bool
	upstream.AfterFunc(c, func() { ran.Store(true) })
	c.cancel()
	waitFor(t, "the slot's function", ran.Load)
}

// A context derived from connCtx (as a configured Transport derives one)
// ends with it.
func TestConnCtxDerived(t *testing.T) {
	c := newConnCtx()
	d, cancel := context.WithCancel(c)
	defer cancel()
	d2, cancel2 := context.WithTimeout(c, time.Hour)
	defer cancel2()
	c.cancel()
	for _, x := range []context.Context{d, d2} {
		select {
		case <-x.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("a derived context did not end with its parent")
		}
	}
}
