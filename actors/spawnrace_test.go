package actors

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"
)

// Shutdown inside Spawn's window (shell registered, actor not spawned yet)
// used to Poison a nil pid and panic. Now Stop leaves the actor to Spawn,
// which stops it and reports ErrStopped, and Shutdown returns at once.
func TestShutdownDuringSpawn(t *testing.T) {
	sys, err := NewSystem(DefaultSystemConfig())
	if err != nil {
		t.Fatal(err)
	}
	inWindow, release := make(chan struct{}), make(chan struct{})
	spawnHook = func() { close(inWindow); <-release }
	defer func() { spawnHook = func() {} }()
	spawned := make(chan error, 1)
	go func() {
		_, err := Spawn(sys, DefaultShellConfig("late", "test"), counterFactory(newRecorder(), 1000), nil)
		spawned <- err
	}()
	<-inWindow
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		shut <- sys.Shutdown(ctx)
	}()
	eventually(t, "Shutdown to stop the registered shell", func() bool {
		sys.mu.Lock()
		defer sys.mu.Unlock()
		sh, ok := sys.shells["late"].(*Shell[cmsg, cout])
		return ok && sh.state.Load() == stateStopping
	})
	close(release)
	if err := <-spawned; !errors.Is(err, ErrStopped) {
		t.Fatalf("Spawn: %v, want ErrStopped", err)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// startTimerCore arms a timer that is already due in Start, so its tick is
// posted while Spawn may still be returning.
type startTimerCore struct {
	Effects[cout]
	ticked chan struct{}
}

func (c *startTimerCore) Start(now time.Time)             { c.SetTimer("now", now) }
func (c *startTimerCore) Step(time.Time, cmsg)            {}
func (c *startTimerCore) Tick(now time.Time, name string) { close(c.ticked) }

// A timer armed in Start and due at once is delivered: the tick goes to the
// actor's own pid, not to a Shell field Spawn may not have set yet.
func TestTimerDueInStartIsDelivered(t *testing.T) {
	for i := range 20 {
		h := newHarness(t)
		ticked := make(chan struct{})
		if _, err := Spawn(h.sys, DefaultShellConfig("t"+strconv.Itoa(i), "test"),
			func() Core[cmsg, cout] { return &startTimerCore{ticked: ticked} }, nil); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ticked:
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: the timer armed in Start never ticked", i)
		}
	}
}
