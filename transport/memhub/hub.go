package memhub

import (
	"container/heap"
	"fmt"
	"math/rand"
	"sync"
	"time"

	"github.com/asyncrl/asyncrl/transport"
)

// DefaultMaxPayload matches natsbus's default, so code that fits one fits
// the other.
const DefaultMaxPayload = 8 << 20

// DefaultRequestTimeout is the virtual time a Request waits for its reply.
const DefaultRequestTimeout = 5 * time.Second

// Hub is an in-memory message bus shared by simulated nodes. All delivery
// happens when a driver runs: Step, Drain, Advance (or, in auto mode, right
// after each publish), on the goroutine that calls it, one delivery at a
// time, so handlers are never called concurrently.
type Hub struct {
	mu   sync.Mutex
	cond *sync.Cond // signals the end of a delivery run

	rng        *rand.Rand
	start, now time.Time
	queue      itemHeap
	seq        uint64 // tie-break for items due at the same time

	subs      map[uint64]*subscription
	subOrder  []*subscription // subs by id; nil when it must be rebuilt
	nextSub   uint64
	nextMsg   uint64
	nextInbox uint64
	faults    []*faultRule
	nextFault FaultID
	partition map[string]int
	reorder   map[reorderKey][]*delivery
	streams   map[string]*memStream
	events    []Event

	auto           bool
	noRecord       bool
	delivering     bool
	maxPayload     int
	requestTimeout time.Duration
}

// New returns a hub whose every random choice (fault probabilities, random
// delays, reorder shuffles, queue-group picks) comes from a *rand.Rand
// seeded with seed. The virtual clock starts at the Unix epoch.
func New(seed int64) *Hub {
	h := &Hub{
		rng:            rand.New(rand.NewSource(seed)),
		start:          time.Unix(0, 0).UTC(),
		subs:           map[uint64]*subscription{},
		reorder:        map[reorderKey][]*delivery{},
		streams:        map[string]*memStream{},
		maxPayload:     DefaultMaxPayload,
		requestTimeout: DefaultRequestTimeout,
	}
	h.now = h.start
	h.cond = sync.NewCond(&h.mu)
	return h
}

// SetAuto switches synchronous mode on or off. In auto mode every Publish,
// Respond, Request, stream publish and Consume delivers everything due now
// before it returns (on the caller's goroutine; publishes made by handlers
// are delivered in the same run). Delayed deliveries and timers still need
// Advance, and partial reorder windows need Drain or Flush.
func (h *Hub) SetAuto(on bool) {
	h.mu.Lock()
	h.auto = on
	h.mu.Unlock()
}

// SetRecording turns the event log on (the default) or off; long
// simulations that do not assert on the log can save its memory.
func (h *Hub) SetRecording(on bool) {
	h.mu.Lock()
	h.noRecord = !on
	h.mu.Unlock()
}

// SetMaxPayload sets the largest payload the hub's buses accept.
func (h *Hub) SetMaxPayload(n int) {
	h.mu.Lock()
	h.maxPayload = n
	h.mu.Unlock()
}

// SetRequestTimeout sets the virtual time a Request waits for a reply
// before it fails with transport.ErrTimeout.
func (h *Hub) SetRequestTimeout(d time.Duration) {
	h.mu.Lock()
	h.requestTimeout = d
	h.mu.Unlock()
}

// Now is the hub's virtual time.
func (h *Hub) Now() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.now
}

// Elapsed is virtual time since the hub started.
func (h *Hub) Elapsed() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.now.Sub(h.start)
}

// Pending is the number of scheduled deliveries and timers, plus the
// deliveries held in reorder windows.
func (h *Hub) Pending() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, it := range h.queue {
		if !it.cancelled {
			n++
		}
	}
	for _, w := range h.reorder {
		n += len(w)
	}
	return n
}

// Connect attaches a node to the hub and returns its bus. node must be a
// valid subject token (letters, digits, '-', '_'); it is what fault
// selectors and partitions name. Several buses may share a node name.
func (h *Hub) Connect(node string) *Bus {
	if err := transport.ValidToken(node); err != nil {
		panic(fmt.Sprintf("memhub: Connect(%q): %v", node, err))
	}
	return &Bus{h: h, node: node}
}

// item is one scheduled thing: a delivery to a subscription, a delivery to
// a durable consumer, or a timer.
type item struct {
	at        time.Time
	seq       uint64
	d         *delivery
	sd        *streamDelivery
	timer     func() // runs with h.mu held; must not call user code
	cancelled bool
}

type itemHeap []*item

func (q itemHeap) Len() int { return len(q) }
func (q itemHeap) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q itemHeap) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *itemHeap) Push(x any)   { *q = append(*q, x.(*item)) }
func (q *itemHeap) Pop() any {
	old := *q
	it := old[len(old)-1]
	*q = old[:len(old)-1]
	return it
}

func (h *Hub) pushLocked(it *item) *item {
	h.seq++
	it.seq = h.seq
	heap.Push(&h.queue, it)
	return it
}

func (h *Hub) pushDeliveryLocked(d *delivery) {
	at := d.at
	if at.Before(h.now) {
		at = h.now
	}
	h.pushLocked(&item{at: at, d: d})
}

func (h *Hub) timerLocked(after time.Duration, f func()) *item {
	return h.pushLocked(&item{at: h.now.Add(after), timer: f})
}

// popDueLocked removes the earliest item due at or before limit, moving the
// clock forward to it.
func (h *Hub) popDueLocked(limit time.Time) *item {
	for len(h.queue) > 0 {
		it := h.queue[0]
		if it.at.After(limit) {
			return nil
		}
		heap.Pop(&h.queue)
		if it.cancelled {
			continue
		}
		if it.at.After(h.now) {
			h.now = it.at
		}
		return it
	}
	return nil
}

// acquire waits until no other goroutine is delivering and takes the turn.
// Drivers must not be called from inside a handler: the handler's own run
// holds the turn.
func (h *Hub) acquire() {
	h.mu.Lock()
	for h.delivering {
		h.cond.Wait()
	}
	h.delivering = true
	h.mu.Unlock()
}

// release ends a delivery run. In auto mode it first delivers anything that
// other goroutines published while this run was going on, so nothing is
// stranded.
func (h *Hub) release() {
	for {
		h.mu.Lock()
		if h.auto && h.dueLocked() {
			h.mu.Unlock()
			h.process(nil, -1, true)
			continue
		}
		h.delivering = false
		h.cond.Broadcast()
		h.mu.Unlock()
		return
	}
}

func (h *Hub) dueLocked() bool {
	for _, it := range h.queue {
		if !it.cancelled && !it.at.After(h.now) {
			return true
		}
	}
	return false
}

// kick runs a delivery pass in auto mode, unless another goroutine is
// already delivering (it will pick up what we queued before it releases).
func (h *Hub) kick() {
	h.mu.Lock()
	if !h.auto || h.delivering {
		h.mu.Unlock()
		return
	}
	h.delivering = true
	h.mu.Unlock()
	h.process(nil, -1, true)
	h.release()
}

// process delivers due items one at a time, up to max (-1: no limit), with
// limit as the latest due time (nil: the current virtual time). Handlers run
// without the hub lock. inline marks the runs made on a publisher's
// goroutine (auto mode): their messages carry transport.Msg.Inline, so a
// handler knows it must not wait for the publisher (an actor publishing to
// its own full mailbox would wait for itself). It returns how many items it
// processed.
func (h *Hub) process(limit *time.Time, max int, inline bool) int {
	n := 0
	for max < 0 || n < max {
		h.mu.Lock()
		lim := h.now
		if limit != nil {
			lim = *limit
		}
		it := h.popDueLocked(lim)
		if it == nil {
			h.mu.Unlock()
			return n
		}
		r := h.prepareLocked(it)
		h.mu.Unlock()
		if r.m != nil {
			r.m.Inline = inline
		}
		switch {
		case r.h != nil:
			r.h(r.m)
		case r.fn != nil:
			r.fn()
		}
		n++
	}
	return n
}

// run is the user code an item leads to, called outside the lock: a
// subscription's handler with its message (no closure to allocate per
// delivery), or fn; neither when there is none.
type run struct {
	h  transport.Handler
	m  *transport.Msg
	fn func()
}

// prepareLocked records the event for an item and returns the user code to
// run outside the lock.
func (h *Hub) prepareLocked(it *item) run {
	switch {
	case it.timer != nil:
		it.timer()
		return run{}
	case it.d != nil:
		return h.prepareDeliveryLocked(it.d)
	case it.sd != nil:
		return run{fn: h.prepareStreamDeliveryLocked(it.sd)}
	}
	return run{}
}

// Step delivers the single next item due now. It reports whether there was
// one.
func (h *Hub) Step() bool {
	h.acquire()
	n := h.process(nil, 1, false)
	h.release()
	return n == 1
}

// Drain delivers everything due now, including what handlers publish while
// it runs, and releases partial reorder windows. The clock does not move.
// It returns the number of items processed.
func (h *Hub) Drain() int {
	h.acquire()
	defer h.release()
	total := 0
	for {
		total += h.process(nil, -1, false)
		h.mu.Lock()
		flushed := h.flushReorderLocked()
		h.mu.Unlock()
		if flushed == 0 {
			return total
		}
	}
}

// Flush releases partial reorder windows without delivering anything.
func (h *Hub) Flush() {
	h.mu.Lock()
	h.flushReorderLocked()
	h.mu.Unlock()
	h.kick()
}

// Advance moves the virtual clock forward by d, delivering deliveries and
// firing timers in time order as it goes (each at its own time). It returns
// the number of items processed.
func (h *Hub) Advance(d time.Duration) int {
	if d < 0 {
		panic("memhub: Advance with a negative duration")
	}
	h.acquire()
	defer h.release()
	h.mu.Lock()
	target := h.now.Add(d)
	h.mu.Unlock()
	n := h.process(&target, -1, false)
	h.mu.Lock()
	if target.After(h.now) {
		h.now = target
	}
	h.mu.Unlock()
	return n + h.process(nil, -1, false)
}

// RunRealtime starts a goroutine that advances the virtual clock in step
// with the wall clock (every tick), for code that waits on real time, such
// as the transport conformance suite. Determinism is lost while it runs.
// The returned stop function ends the goroutine and waits for it.
func (h *Hub) RunRealtime(tick time.Duration) (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(tick)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				// Read the clock here rather than trusting the tick's
				// timestamp, which can predate last under load.
				now := time.Now()
				if d := now.Sub(last); d > 0 {
					h.Advance(d)
				}
				last = now
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			<-exited
		})
	}
}
