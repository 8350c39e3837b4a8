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

// task is a loop body split across cores: run computes chunk c, the
// indices [lo, hi). Tasks are pointers to structs in the workspace.
type task interface{ run(c, lo, hi int) }

// pool starts a loop's chunks on goroutines without allocating: each
// chunk slot has a func() made once, which reads its task and range from
// the slot (a go statement with arguments would allocate a closure per
// call). No goroutine outlives the loop.
type pool struct {
	wg      sync.WaitGroup
	slots   []chunk
	runners []func()
}

type chunk struct {
	t         task
	c, lo, hi int
}

func (p *pool) runner(i int) func() {
	for len(p.runners) <= i {
		j := len(p.runners)
		p.slots = append(p.slots, chunk{})
		p.runners = append(p.runners, func() {
			defer p.wg.Done()
			s := &p.slots[j]
			s.t.run(s.c, s.lo, s.hi)
		})
	}
	return p.runners[i]
}

// parallelFor runs t over [0, n) split into contiguous chunks, chunk c on
// its own goroutine (c < workers()), when the work (n · cost, in
// multiply-adds) is large enough to pay for the goroutines; else it runs
// t.run(0, 0, n) inline. Every kernel computes each output element with
// the same arithmetic whatever chunk holds it, so results never depend on
// the split or on scheduling.
func (p *pool) parallelFor(n, cost int, t task) {
	w := workers()
	total := n * max(cost, 1)
	if total < 2*minWork || w == 1 || n < 2 {
		t.run(0, 0, n)
		return
	}
	w = min(w, total/minWork, n)
	for i := 1; i < w; i++ {
		f := p.runner(i)
		p.slots[i] = chunk{t: t, c: i, lo: i * n / w, hi: (i + 1) * n / w}
		p.wg.Add(1)
		go f()
	}
	t.run(0, 0, n/w)
	p.wg.Wait()
	for i := 1; i < w; i++ {
		p.slots[i] = chunk{}
	}
}
