package server

import (
	"io"
	"sync"
)

// job is one training request: run on the trainer, or fail if the model
// goes away first.
type job struct {
	run  func(Trainer)
	fail func(error)
}

// modelWorker runs one model's training jobs in arrival order on one
// goroutine (a Trainer is not safe for concurrent use).
type modelWorker struct {
	t      Trainer
	mu     sync.Mutex
	cond   *sync.Cond
	queue  []job
	closed bool
	done   chan struct{}
}

func newModelWorker(t Trainer) *modelWorker {
	w := &modelWorker{t: t, done: make(chan struct{})}
	w.cond = sync.NewCond(&w.mu)
	go w.run()
	return w
}

// enqueue queues a job; false once the worker is closed.
func (w *modelWorker) enqueue(j job) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	w.queue = append(w.queue, j)
	w.cond.Signal()
	return true
}

func (w *modelWorker) run() {
	defer close(w.done)
	for {
		w.mu.Lock()
		for len(w.queue) == 0 && !w.closed {
			w.cond.Wait()
		}
		if w.closed {
			w.mu.Unlock()
			return
		}
		j := w.queue[0]
		w.queue[0] = job{}
		w.queue = w.queue[1:]
		w.mu.Unlock()
		j.run(w.t)
	}
}

// close stops the worker after its current job. Jobs still queued fail
// with reason when it is non-nil; with nil (the server shutting down) they
// stay pending in the durable store, where the next server marks them
// failed.
func (w *modelWorker) close(reason error) {
	w.mu.Lock()
	w.closed = true
	q := w.queue
	w.queue = nil
	w.cond.Signal()
	w.mu.Unlock()
	<-w.done
	// A backend whose models hold a process (tinker/bridgetrain's child)
	// releases it here: unload, session expiry, server close.
	if c, ok := w.t.(io.Closer); ok {
		_ = c.Close()
	}
	if reason != nil {
		for _, j := range q {
			j.fail(reason)
		}
	}
}
