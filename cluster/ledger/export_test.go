package ledger

import (
	"context"
	"time"
)

// LagReads makes Record's first read answer as a replica that has not
// applied any write yet (every entry absent), n times: a KV direct get a
// follower answered while it was behind the stream's leader.
func LagReads(l *Ledger, n int) {
	real := l.get
	l.read = func(ctx context.Context, promptID string) (Entry, uint64, bool, error) {
		if n > 0 {
			n--
			return Entry{}, 0, false, nil
		}
		return real(ctx, promptID)
	}
}

// LagLists makes Entries' next n passes over the bucket answer as a
// replica that has applied nothing since now: each returns the listing
// (and its newest revision) as it is at this call.
func LagLists(l *Ledger, n int) error {
	old, seen, err := l.listOnce(context.Background())
	if err != nil {
		return err
	}
	l.list = func(ctx context.Context) ([]Entry, uint64, error) {
		if n > 0 {
			n--
			return old, seen, nil
		}
		return l.listOnce(ctx)
	}
	return nil
}

// SetListLag sets how long Entries waits for a lagging replica; the
// returned function restores it.
func SetListLag(d time.Duration) func() {
	prev := listLag
	listLag = d
	return func() { listLag = prev }
}
