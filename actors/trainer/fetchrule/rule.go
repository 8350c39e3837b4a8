package fetchrule

import (
	"fmt"
	"time"
)

const (
	// DefaultRetryFor is the window when Rule.RetryFor is 0.
	DefaultRetryFor = 30 * time.Second
	// FirstWait is the wait after the first failed try.
	FirstWait = 100 * time.Millisecond
	// MaxWait caps the doubling waits.
	MaxWait = 2 * time.Second
)

// Rule is the retry schedule of a fetch (see the package doc).
type Rule struct {
	// RetryFor is the window from the first try: 0 is DefaultRetryFor,
	// < 0 tries once.
	RetryFor time.Duration
}

// Window is the rule's effective window: DefaultRetryFor for 0, 0 for a
// negative RetryFor (one try).
func (r Rule) Window() time.Duration {
	switch {
	case r.RetryFor == 0:
		return DefaultRetryFor
	case r.RetryFor < 0:
		return 0
	}
	return r.RetryFor
}

// Backoff is the wait after failed try n (1, 2, …): FirstWait doubling,
// at most MaxWait. n < 1 counts as 1.
func Backoff(n int) time.Duration {
	d := FirstWait
	for i := 1; i < n && d < MaxWait; i++ {
		d *= 2
	}
	return min(d, MaxWait)
}

// Decision is what to do after a failed try.
type Decision struct {
	// Wait before the next try; meaningful when !GiveUp.
	Wait time.Duration
	// GiveUp: the fetch fails with the try's error.
	GiveUp bool
	// Tries and Elapsed echo the inputs, for the give-up's error.
	Tries   int
	Elapsed time.Duration
}

// After decides after failed try n, made elapsed after try 1 began.
func (r Rule) After(n int, elapsed time.Duration) Decision {
	d := Decision{Wait: Backoff(n), Tries: n, Elapsed: max(elapsed, 0)}
	if r.RetryFor < 0 || d.Elapsed+d.Wait > r.Window() {
		d.GiveUp, d.Wait = true, 0
	}
	return d
}

// String is the give-up's note for an error: "tried 3 times over 1.2s".
func (d Decision) String() string {
	return fmt.Sprintf("tried %d times over %v", d.Tries, d.Elapsed)
}
