package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// RetryConfig bounds retries of failed store calls.
type RetryConfig struct {
	// Attempts is the total number of tries per call (≥ 1).
	Attempts int
	// BaseDelay is the pause before the second try; it doubles each time.
	BaseDelay time.Duration
	// MaxDelay caps the pause between tries.
	MaxDelay time.Duration
}

// DefaultRetryConfig: 5 tries, 100ms doubling to at most 5s.
func DefaultRetryConfig() RetryConfig {
	return RetryConfig{Attempts: 5, BaseDelay: 100 * time.Millisecond, MaxDelay: 5 * time.Second}
}

// Validate names the first bad field.
func (c RetryConfig) Validate() error {
	switch {
	case c.Attempts < 1:
		return fmt.Errorf("store: retry: Attempts %d must be ≥ 1", c.Attempts)
	case c.BaseDelay < 0 || c.MaxDelay < 0:
		return fmt.Errorf("store: retry: BaseDelay %v and MaxDelay %v must be ≥ 0", c.BaseDelay, c.MaxDelay)
	}
	return nil
}

// Delay is the pause before try number attempt+1 (attempt counts from 1).
func (c RetryConfig) Delay(attempt int) time.Duration {
	d := c.BaseDelay
	for i := 1; i < attempt && d < c.MaxDelay; i++ {
		d *= 2
	}
	if d > c.MaxDelay {
		d = c.MaxDelay
	}
	return d
}

// SleepFunc pauses for d or until ctx ends.
type SleepFunc func(ctx context.Context, d time.Duration) error

// ContextSleep is the real SleepFunc.
func ContextSleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Retrying wraps a Store and retries failed calls with exponential backoff.
// Not-found, invalid keys and an ended context are final and not retried.
// A call's own deadline while ctx is still alive (the NATS client's
// default timeout while a stream elects a new leader) is transient.
// A Put is retried only when its reader is an io.Seeker (it is rewound to
// where it started); otherwise the bytes are gone and the first error stands.
type Retrying struct {
	Store
	cfg     RetryConfig
	sleep   SleepFunc
	retries atomic.Int64
}

// Retries is how many times a call was retried so far (for metrics, tests).
func (r *Retrying) Retries() int64 { return r.retries.Load() }

var _ Store = (*Retrying)(nil)

// NewRetrying wraps s; sleep nil means ContextSleep.
func NewRetrying(s Store, cfg RetryConfig, sleep SleepFunc) (*Retrying, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if sleep == nil {
		sleep = ContextSleep
	}
	return &Retrying{Store: s, cfg: cfg, sleep: sleep}, nil
}

func final(ctx context.Context, err error) bool {
	return errors.Is(err, ErrNotFound) || errors.Is(err, ErrInvalidKey) || ctx.Err() != nil || errors.Is(err, context.Canceled)
}

func (r *Retrying) do(ctx context.Context, f func() error) error {
	var err error
	for attempt := 1; ; attempt++ {
		if err = f(); err == nil || final(ctx, err) || attempt >= r.cfg.Attempts {
			if err != nil && attempt > 1 {
				return fmt.Errorf("after %d tries: %w", attempt, err)
			}
			return err
		}
		if serr := r.sleep(ctx, r.cfg.Delay(attempt)); serr != nil {
			return fmt.Errorf("%w (while retrying: %w)", serr, err)
		}
		r.retries.Add(1)
	}
}

// Put implements Store.
func (r *Retrying) Put(ctx context.Context, key string, rd io.Reader, size int64) error {
	seeker, ok := rd.(io.Seeker)
	if !ok {
		return r.Store.Put(ctx, key, rd, size)
	}
	start, err := seeker.Seek(0, io.SeekCurrent)
	if err != nil {
		return r.Store.Put(ctx, key, rd, size)
	}
	first := true
	return r.do(ctx, func() error {
		if !first {
			if _, err := seeker.Seek(start, io.SeekStart); err != nil {
				return fmt.Errorf("store: rewinding for a retry: %w", err)
			}
		}
		first = false
		return r.Store.Put(ctx, key, rd, size)
	})
}

// Get implements Store.
func (r *Retrying) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	var rc io.ReadCloser
	err := r.do(ctx, func() error {
		var err error
		rc, err = r.Store.Get(ctx, key)
		return err
	})
	return rc, err
}

// List implements Store.
func (r *Retrying) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	err := r.do(ctx, func() error {
		var err error
		keys, err = r.Store.List(ctx, prefix)
		return err
	})
	return keys, err
}

// Delete implements Store.
func (r *Retrying) Delete(ctx context.Context, key string) error {
	return r.do(ctx, func() error { return r.Store.Delete(ctx, key) })
}

// Commit implements Store.
func (r *Retrying) Commit(ctx context.Context, key string, data []byte) error {
	return r.do(ctx, func() error { return r.Store.Commit(ctx, key, data) })
}
