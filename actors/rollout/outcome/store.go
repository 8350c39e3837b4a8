package outcome

import "time"

// The trajectory buffer's store schedule, the one source of its numbers:
// the rollout actor's defaults (Config.StoreRetry, StoreFor) and the
// simulator's rollouts, which step the Storing stage on the same clock.
//
// One try is bounded by DefaultStoreRetry; a failed try is tried again
// StoreRetryWait(retry) later, until StoreFor has passed since the store
// began — then the store gives up (Stored with its last error: Aborted,
// Unstored). A clustered stream electing a new leader after its server
// died takes 4–9 s: well inside StoreFor.
const (
	DefaultStoreRetry = 5 * time.Second
	DefaultStoreFor   = time.Minute
)

// StoreRetryWait is how long after a failed try a store is tried again:
// a tenth of the try's bound.
func StoreRetryWait(retry time.Duration) time.Duration { return retry / 10 }

// StoreGivesUp says whether a store that began at began and whose last
// try failed at now gives up (storeFor has passed) rather than trying
// again.
func StoreGivesUp(began, now time.Time, storeFor time.Duration) bool {
	return now.After(began.Add(storeFor))
}
