package loop

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// counter is a toy RawNode core: each input n asks for n to be echoed;
// an echo of a negative number asks for its negation once more (an
// effect whose answer is stepped during apply); ticks are counted.
type counter struct {
	seen  []int
	ticks int
	ready rd
}

type rd struct{ echo []int }

func (r rd) Empty() bool { return len(r.echo) == 0 }

func (c *counter) Step(_ time.Time, in int) {
	c.seen = append(c.seen, in)
	c.ready.echo = append(c.ready.echo, in)
}
func (c *counter) Tick(time.Time) { c.ticks++ }
func (c *counter) Ready() rd      { return c.ready }
func (c *counter) Advance()       { c.ready = rd{} }

// until polls cond every millisecond until it holds or 5 s pass.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestLoopStepsInPushOrderAndAppliesFollowUps: inputs from several
// goroutines reach the core in each pusher's order; an input stepped
// during Apply is applied in the same ApplyAll; Done ends Run with nil.
func TestLoopStepsInPushOrderAndAppliesFollowUps(t *testing.T) {
	c := &counter{}
	var mu sync.Mutex
	var applied []int
	l := &Loop[int, rd]{Core: c, Inbox: NewInbox[int](0)}
	l.Apply = func(r rd) {
		for _, n := range r.echo {
			mu.Lock()
			applied = append(applied, n)
			mu.Unlock()
			if n < 0 {
				c.Step(time.Time{}, -n) // the effect's answer, stepped at once
			}
		}
	}
	l.Done = func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(applied) == 2*100+2 // and -7000, 7000
	}
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() {
			for i := 1; i <= 100; i++ {
				l.Inbox.Push(context.Background(), g*1000+i)
			}
		})
	}
	wg.Wait()
	l.Inbox.Push(context.Background(), -7000)
	if err := l.Run(context.Background()); err != nil {
		t.Fatalf("Run = %v, want nil once Done", err)
	}
	for g := range 2 {
		var got []int
		for _, n := range c.seen {
			if n > g*1000 && n <= g*1000+100 {
				got = append(got, n)
			}
		}
		if len(got) != 100 || !slices.IsSorted(got) {
			t.Errorf("pusher %d's inputs stepped out of order or lost: %v", g, got)
		}
	}
	if i := slices.Index(applied, -7000); i < 0 || i+1 >= len(applied) || applied[i+1] != 7000 {
		t.Errorf("the follow-up 7000 of -7000 was not applied right after it: %v", applied)
	}
}

// TestLoopTicksAndPolls: with Every set the core is ticked; Poll, when
// set, replaces the tick's default; ctx's end returns its error.
func TestLoopTicksAndPolls(t *testing.T) {
	c := &counter{}
	l := &Loop[int, rd]{Core: c, Inbox: NewInbox[int](0), Apply: func(rd) {}, Every: time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var mu sync.Mutex
	ticks := func() int { mu.Lock(); defer mu.Unlock(); return c.ticks }
	l.Poll = func(now time.Time) {
		mu.Lock()
		defer mu.Unlock()
		l.Feed(now)
		c.Tick(now)
	}
	go func() { done <- l.Run(ctx) }()
	until(t, "three ticks", func() bool { return ticks() >= 3 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}

	// The default tick: Feed, then Tick.
	c2 := &counter{}
	l2 := &Loop[int, rd]{Core: c2, Inbox: NewInbox[int](0), Apply: func(rd) {}, Every: time.Millisecond}
	l2.Done = func() bool { return c2.ticks >= 2 }
	if err := l2.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestLoopBatchOne: with Batch 1 each turn steps one input and the loop
// comes back for the rest (a partial Take signals Ready again).
func TestLoopBatchOne(t *testing.T) {
	c := &counter{}
	var turns [][]int
	l := &Loop[int, rd]{Core: c, Inbox: NewInbox[int](0), Batch: 1}
	l.Apply = func(r rd) { turns = append(turns, r.echo) }
	l.Done = func() bool { return len(turns) == 3 }
	for i := 1; i <= 3; i++ {
		l.Inbox.Push(context.Background(), i)
	}
	if err := l.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := [][]int{{1}, {2}, {3}}; !slices.EqualFunc(turns, want, slices.Equal) {
		t.Errorf("turns %v, want one input each %v", turns, want)
	}
}

// TestInboxLimitBlocksPush: a full inbox holds Push until a Take frees
// room, and gives up when ctx ends, pushing nothing.
func TestInboxLimitBlocksPush(t *testing.T) {
	b := NewInbox[int](2)
	ctx := context.Background()
	b.Push(ctx, 1)
	b.Push(ctx, 2)
	gone, cancelGone := context.WithCancel(ctx)
	cancelGone()
	if b.Push(gone, 9) || b.Len() != 2 {
		t.Fatalf("a Push onto a full inbox went through (len %d)", b.Len())
	}
	pushed := make(chan bool, 1)
	go func() { pushed <- b.Push(ctx, 3) }()
	if got := b.Take(1); !slices.Equal(got, []int{1}) {
		t.Fatalf("Take(1) = %v", got)
	}
	if !<-pushed {
		t.Fatal("Push did not go through once there was room")
	}
	if got := b.Take(0); !slices.Equal(got, []int{2, 3}) {
		t.Fatalf("Take(0) = %v, want [2 3]", got)
	}
	b.Push(ctx, 4)
	b.Push(ctx, 5)
	cctx, cancel := context.WithCancel(ctx)
	go func() { pushed <- b.Push(cctx, 6) }()
	cancel()
	if <-pushed {
		t.Fatal("Push reported success after its ctx ended on a full inbox")
	}
	if b.Len() != 2 {
		t.Fatalf("Len = %d after a refused Push, want 2", b.Len())
	}
}
