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
