package actors

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestDriverRunsCoreDeterministically(t *testing.T) {
	run := func() string {
		rec := newRecorder()
		d := NewDriver[cmsg, cout](&counterCore{every: 2, rec: rec}, NewManualClock(t0))
		for i := range 3 {
			d.Step(cmsg{N: i}) // count 2 arms flush at t0+1s
		}
		d.Advance(500 * time.Millisecond)
		d.Step(cmsg{N: 3}) // count 4 re-arms flush at t0+1.5s
		d.Advance(2 * time.Second)
		_, _, _, at := rec.snapshot()
		return fmt.Sprint(d.Sends, d.Ticks, len(d.Logs), len(d.Metrics), at, d.Armed())
	}
	a, b := run(), run()
	if a != b {
		t.Fatalf("two runs differ:\n%s\n%s", a, b)
	}
	want := "[{out.batch {batch 2}} {out.batch {batch 4}} {out.flush {flush 4}}] [flush] 2 4 [" +
		fmt.Sprint(t0.Add(1500*time.Millisecond)) + "] []"
	if a != want {
		t.Fatalf("got  %s\nwant %s", a, want)
	}
}

func TestDriverDueAndCancelledTimers(t *testing.T) {
	var ticks []string
	c := &cancelCore{ticks: &ticks, mu: &sync.Mutex{}}
	d := NewDriver[string, string](c, NewManualClock(t0))
	d.Step("arm")
	d.Step("cancel")
	d.Advance(time.Hour)
	if len(d.Ticks) != 0 {
		t.Fatalf("cancelled timer fired: %v", d.Ticks)
	}
	d.Step("due")
	if fmt.Sprint(d.Ticks) != "[past]" || fmt.Sprint(ticks) != "[past]" {
		t.Fatalf("due timer: %v %v", d.Ticks, ticks)
	}
}
