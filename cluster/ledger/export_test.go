package ledger

import "context"

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
