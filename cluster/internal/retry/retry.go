// Package retry is the cluster's retry loop for operations that fail
// while JetStream elects a leader or a member is still starting.
package retry

import (
	"context"
	"errors"
	"time"
)

// Interval is the pause between two attempts.
const Interval = 500 * time.Millisecond

type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// Permanent marks err as final: Do returns it at once.
func Permanent(err error) error { return permanent{err} }

// Do calls f every Interval until it succeeds, returns a Permanent error,
// ctx ends or within passed; it returns f's last error.
func Do(ctx context.Context, within time.Duration, f func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := f()
		if err == nil {
			return nil
		}
		var p permanent
		if errors.As(err, &p) {
			return p.error
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(Interval):
		}
	}
}

// After is f gated by ready, for Do: each try runs ready first and f only
// once ready succeeded, else returns ready's error (a Permanent one ends
// Do). ready is a short ask for the leader f's requests need: a JetStream
// request sent while there is none is never answered and waits out its
// whole timeout (nats.go v1.55.0 jetstream/jetstream.go
// defaultAPITimeout, 5 s), an ask with a short bound finds the leader as
// soon as it is there.
func After(ready, f func() error) func() error {
	return func() error {
		if err := ready(); err != nil {
			return err
		}
		return f()
	}
}
