package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// Concurrent writers and a reader: every write lands whole (run with -race).
func TestConcurrentWrites(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				_, _ = b.Write([]byte("ab\n"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := strings.Count(b.String(), "ab\n"); got != 800 || len(b.String()) != 2400 {
		t.Fatalf("%d whole lines, %d bytes; want 800 and 2400", got, len(b.String()))
	}
}
