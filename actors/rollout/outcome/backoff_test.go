package outcome

import (
	"testing"
	"time"
)

// EnvBackoff: none before a failure; Base, doubling per consecutive
// environment-failed group up to Max; a group aborted for another reason
// leaves the pace alone; a finished group resets it.
func TestEnvBackoff(t *testing.T) {
	b := EnvBackoff{Base: 10 * time.Millisecond, Max: 35 * time.Millisecond}
	var got []time.Duration
	step := func(envFailed, finished bool) {
		eps := []Episode{{}, {}}
		if !finished {
			eps[1].Err = "engine refused"
		}
		eps[0].Env = envFailed
		if envFailed {
			eps[0].Err = "environment failed"
		}
		b.Ended(eps)
		got = append(got, b.Delay())
	}
	step(false, true)  // fine
	step(true, false)  // env failed
	step(true, false)  // again
	step(false, false) // an engine abort: unchanged
	step(true, false)  // capped
	step(true, false)
	step(false, true) // finished: reset
	want := []time.Duration{0, 10 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond,
		35 * time.Millisecond, 35 * time.Millisecond, 0}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("delays %v, want %v", got, want)
		}
	}
	var z EnvBackoff // the defaults
	envFail := []Episode{{Err: "environment timed out", Env: true}}
	for range 40 {
		z.Ended(envFail)
	}
	if z.Delay() != DefaultEnvBackoffMax {
		t.Errorf("zero value after 40 failures waits %v, want %v", z.Delay(), DefaultEnvBackoffMax)
	}
	z.Ended(envFail)
	if z.Ended([]Episode{{}}); z.Delay() != 0 {
		t.Errorf("after a finished group: %v", z.Delay())
	}
}
