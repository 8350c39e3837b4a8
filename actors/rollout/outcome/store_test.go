package outcome

import (
	"testing"
	"time"
)

// A store gives up only once StoreFor has passed since it began: a try
// failing at the deadline itself is tried again, one after it is not.
func TestStoreGivesUpAfterStoreFor(t *testing.T) {
	began := time.Unix(1000, 0)
	for _, c := range []struct {
		after time.Duration
		want  bool
	}{{0, false}, {DefaultStoreFor - time.Millisecond, false}, {DefaultStoreFor, false}, {DefaultStoreFor + time.Nanosecond, true}, {2 * DefaultStoreFor, true}} {
		if got := StoreGivesUp(began, began.Add(c.after), DefaultStoreFor); got != c.want {
			t.Errorf("a try failing %v after the store began: gives up %v, want %v", c.after, got, c.want)
		}
	}
	if got := StoreRetryWait(DefaultStoreRetry); got != 500*time.Millisecond {
		t.Errorf("StoreRetryWait(%v) = %v, want 500ms (a tenth)", DefaultStoreRetry, got)
	}
}
