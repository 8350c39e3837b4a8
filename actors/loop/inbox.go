package loop

import (
	"context"
	"sync"
)

// Inbox is a loop's mailbox: any goroutine pushes, the loop takes, in
// push order. The zero value is not usable; see NewInbox.
type Inbox[In any] struct {
	mu    sync.Mutex
	q     []In
	limit int
	ready chan struct{}
	// space is closed (and replaced) whenever Take frees room, waking
	// every Push that waits for it.
	space chan struct{}
}

// NewInbox returns an inbox holding at most limit inputs; limit 0 means
// no limit (Push never blocks).
func NewInbox[In any](limit int) *Inbox[In] {
	return &Inbox[In]{limit: max(limit, 0), ready: make(chan struct{}, 1), space: make(chan struct{})}
}

// Push appends in. With a limit it waits while the inbox is full, until
// there is room (true) or ctx ends (false: in was not pushed).
func (b *Inbox[In]) Push(ctx context.Context, in In) bool {
	for {
		b.mu.Lock()
		if b.limit == 0 || len(b.q) < b.limit {
			b.q = append(b.q, in)
			b.mu.Unlock()
			select {
			case b.ready <- struct{}{}:
			default:
			}
			return true
		}
		space := b.space
		b.mu.Unlock()
		select {
		case <-space:
		case <-ctx.Done():
			return false
		}
	}
}

// Take removes and returns up to n inputs in push order (n ≤ 0: all).
func (b *Inbox[In]) Take(n int) []In {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.q) == 0 {
		return nil
	}
	if n <= 0 || n > len(b.q) {
		n = len(b.q)
	}
	out := b.q[:n:n]
	if n == len(b.q) {
		b.q = nil
	} else {
		b.q = b.q[n:]
		// Inputs are left: the loop must come back for them.
		select {
		case b.ready <- struct{}{}:
		default:
		}
	}
	close(b.space)
	b.space = make(chan struct{})
	return out
}

// Len is the number of inputs waiting.
func (b *Inbox[In]) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.q)
}

// Ready receives a value after a Push (or a partial Take): the loop's
// signal to Take. A signal may find the inbox empty (taken meanwhile).
func (b *Inbox[In]) Ready() <-chan struct{} { return b.ready }
