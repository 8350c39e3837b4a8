package messages

import (
	"strings"
	"sync"
	"testing"
)

// String builds its line in a pooled buffer: lines built at the same time
// on many goroutines must not see each other's bytes, and a line that grew
// past the pooled size must come out whole.
func TestStringConcurrent(t *testing.T) {
	ms := samples()
	long := TrainBatch{Header: hdr(1), Step: 3}
	for range 2000 {
		long.GroupIDs = append(long.GroupIDs, strings.Repeat("g", 40))
	}
	ms = append(ms, long)
	want := make([]string, len(ms))
	for i, m := range ms {
		want[i] = m.String()
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range 200 {
				i := (g + r) % len(ms)
				if got := ms[i].String(); got != want[i] {
					errs <- got + "\nwant\n" + want[i]
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatalf("String() on 8 goroutines:\n%s", e)
	}
}
