package fetchrule

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	want := []time.Duration{100, 200, 400, 800, 1600, 2000, 2000}
	for i, w := range want {
		if got := Backoff(i + 1); got != w*time.Millisecond {
			t.Errorf("Backoff(%d) = %v, want %v", i+1, got, w*time.Millisecond)
		}
	}
	if Backoff(0) != FirstWait || Backoff(1000) != MaxWait {
		t.Errorf("Backoff(0) = %v, Backoff(1000) = %v", Backoff(0), Backoff(1000))
	}
}

// TestScheduleOverWindow walks the rule as a shell does, on a virtual
// clock where each try takes no time: with the default window the tries
// are at 0, 0.1, 0.3, 0.7, 1.5, 3.1, then every 2 s, and the last try
// starts no later than 30 s; the give-up names the tries and the time.
func TestScheduleOverWindow(t *testing.T) {
	var r Rule
	elapsed, tries := time.Duration(0), 0
	for {
		tries++
		d := r.After(tries, elapsed)
		if d.GiveUp {
			if d.Tries != tries || d.Elapsed != elapsed || d.Wait != 0 {
				t.Fatalf("give-up %+v at try %d, %v", d, tries, elapsed)
			}
			break
		}
		elapsed += d.Wait
		if elapsed > DefaultRetryFor {
			t.Fatalf("try %d starts at %v, past the window", tries+1, elapsed)
		}
	}
	// 3.1 s after 6 tries, then 13 tries 2 s apart: 29.1 s at try 19;
	// another 2 s would end at 31.1 s.
	if tries != 19 || elapsed != 29100*time.Millisecond {
		t.Fatalf("gave up after try %d at %v; want try 19 at 29.1s", tries, elapsed)
	}
	if got := r.After(19, elapsed).String(); got != "tried 19 times over 29.1s" {
		t.Errorf("give-up note %q", got)
	}
}

func TestWindow(t *testing.T) {
	for _, tc := range []struct {
		retryFor, window time.Duration
		firstGivesUp     bool
	}{
		{0, DefaultRetryFor, false},
		{-time.Nanosecond, 0, true},
		{50 * time.Millisecond, 50 * time.Millisecond, true}, // the first wait (100 ms) would end past it
		{time.Second, time.Second, false},
	} {
		r := Rule{RetryFor: tc.retryFor}
		d := r.After(1, 0)
		if r.Window() != tc.window || d.GiveUp != tc.firstGivesUp {
			t.Errorf("RetryFor %v: window %v, first try gives up %v; want %v, %v", tc.retryFor, r.Window(), d.GiveUp, tc.window, tc.firstGivesUp)
		}
	}
	// A negative window's give-up says one try over no time, not "-1ns".
	if got := (Rule{RetryFor: -1}).After(1, 0).String(); got != "tried 1 times over 0s" {
		t.Errorf("RetryFor < 0: %q", got)
	}
	// The boundary: a wait that ends exactly at the window is allowed.
	if d := (Rule{RetryFor: time.Second}).After(1, 900*time.Millisecond); d.GiveUp {
		t.Errorf("a try ending exactly at the window gave up: %+v", d)
	}
}
