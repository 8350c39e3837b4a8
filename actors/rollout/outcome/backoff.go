package outcome

import "time"

// The default pace after environment failures: the first wait, and the
// most any wait grows to.
const (
	DefaultEnvBackoff    = 50 * time.Millisecond
	DefaultEnvBackoffMax = time.Second
)

// EnvBackoff paces a rollout actor's groups after its chat environment
// failed. A group that ended with an environment failure (an error or a
// timeout of Reset or Step) makes the actor's next group wait: Base after
// one such group, doubling with each consecutive one, up to Max. A group
// whose episodes all finished resets it; a group aborted for another
// reason (an engine, the trajectory buffer) leaves it as it is.
//
// Without it a dead environment server is called in a hot loop: each
// aborted group is requeued at once and its next attempt fails at once
// (issue 33's chaos saw thousands of environment errors a second).
// Nothing is lost either way; the wait only spends less CPU on failures.
// The zero value waits Default{EnvBackoff,EnvBackoffMax}.
type EnvBackoff struct {
	Base, Max time.Duration
	failed    int
}

// Episode is how one episode of a group ended: Err its error's text (""
// finished), Env whether its environment failed it.
type Episode struct {
	Err string
	Env bool
}

// Ended records a group's end from its episodes'.
func (b *EnvBackoff) Ended(eps []Episode) {
	finished := true
	for _, e := range eps {
		if e.Env {
			b.failed++
			return
		}
		finished = finished && e.Err == ""
	}
	if finished {
		b.failed = 0
	}
}

// Delay is how long the next group waits before its episodes start.
func (b *EnvBackoff) Delay() time.Duration {
	if b.failed == 0 {
		return 0
	}
	base, most := b.Base, b.Max
	if base <= 0 {
		base = DefaultEnvBackoff
	}
	if most <= 0 {
		most = DefaultEnvBackoffMax
	}
	d := base
	for i := 1; i < b.failed && d < most; i++ {
		d *= 2
	}
	return min(d, most)
}
