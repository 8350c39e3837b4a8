package transformer

import (
	"runtime"
	"sync"
)

// minWork is the multiply-adds worth one more goroutine.
const minWork = 1 << 15

// workers is how many chunks parallelFor may use (its callers size
// per-chunk scratch by it).
func workers() int { return runtime.GOMAXPROCS(0) }

// parallelFor runs f over [0, n) split into contiguous chunks, chunk c on
// its own goroutine (c < workers()), when the work (n · cost, in
// multiply-adds) is large enough to pay for the goroutines; else it runs
// f(0, 0, n) inline. Every kernel computes each output element with the
// same arithmetic whatever chunk holds it, so results never depend on the
// split or on scheduling.
func parallelFor(n int, cost int, f func(c, lo, hi int)) {
	w := workers()
	total := n * max(cost, 1)
	if total < 2*minWork || w == 1 || n < 2 {
		f(0, 0, n)
		return
	}
	w = min(w, total/minWork, n)
	var wg sync.WaitGroup
	for i := 1; i < w; i++ {
		lo, hi := i*n/w, (i+1)*n/w
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i, lo, hi)
		}()
	}
	f(0, 0, n/w)
	wg.Wait()
}
