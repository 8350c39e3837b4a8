package sim

import (
	"container/heap"
	"context"
	"encoding/hex"
	"fmt"
	"hash"
	"math/rand"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/memhub"
)

// runID is the run id on every subject and message header.
const runID = "sim"

// quantum is how far the loop advances the hub's clock at a time while
// deliveries are pending, so timers set by handlers fire at most this late.
const quantum = time.Millisecond

// timer is one scheduled sim-side action (engine step, training done,
// heartbeat, fault start or end).
type timer struct {
	at      time.Duration
	seq     uint64
	label   string
	routine bool
	fn      func()
}

type timerHeap []*timer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)   { *h = append(*h, x.(*timer)) }
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}

// world is one simulated run: the hub, the nodes, the oracle, the clock.
type world struct {
	cfg  Config
	rng  *rand.Rand
	hub  *memhub.Hub
	wl   workload
	tmrs timerHeap
	tseq uint64

	ctl     *ctlNode
	trainer *trainerNode
	pub     *pubNode
	engines []*engineNode
	store   *weightStore
	orc     *oracle
	faults  *faultPlan
	// xrng is the second stream (seed ^ inputsSalt) the input generators
	// of issue 37 draw from; in is what they drew (inputs.go).
	xrng *rand.Rand
	in   inputs

	events int
	eventLog
	violation *Violation
	finished  bool
	done      bool
}

// now is virtual time since the start.
func (w *world) now() time.Duration { return w.hub.Elapsed() }

// after schedules fn at now+d.
func (w *world) after(d time.Duration, label string, fn func()) {
	w.tseq++
	heap.Push(&w.tmrs, &timer{at: w.now() + d, seq: w.tseq, label: label, fn: fn})
}

// afterRoutine is after for a routine timer (left out of traces).
func (w *world) afterRoutine(d time.Duration, label string, fn func()) {
	w.tseq++
	heap.Push(&w.tmrs, &timer{at: w.now() + d, seq: w.tseq, label: label, routine: true, fn: fn})
}

// logf records one event line: hashed always, kept in the trace ring.
func (w *world) logf(format string, args ...any) { w.record(false, format, args...) }

// record logs a line (routine lines stay out of the violation trace).
func (w *world) record(routine bool, format string, args ...any) {
	w.eventLog.add(w.now(), routine, format, args...)
}

// event marks the end of one event: it counts it and checks every
// invariant.
func (w *world) event() {
	w.events++
	if w.violation == nil {
		w.orc.checkAll()
	}
}

// fail records the first violation; the loop stops after the event.
func (w *world) fail(inv Invariant, format string, args ...any) {
	if w.violation != nil {
		return
	}
	msg := fmt.Sprintf(format, args...)
	w.logf("VIOLATION %s: %s", inv, msg)
	w.violation = &Violation{Seed: w.cfg.Seed, Scenario: w.cfg.Scenario, Steps: w.cfg.Steps,
		Invariant: inv, Detail: msg, At: w.now(), Bugs: w.cfg.Bugs, Trace: w.trace(),
		Related: w.related(msg)}
}

// send encodes m with the messages codec and publishes it on the hub.
func (w *world) send(bus *memhub.Bus, subject string, m messages.Message) {
	b, err := messages.Encode(m)
	if err != nil {
		panic(fmt.Sprintf("sim: encode %s: %v", m.Kind(), err))
	}
	if err := bus.Publish(context.Background(), subject, b); err != nil {
		panic(fmt.Sprintf("sim: publish %s: %v", subject, err))
	}
}

// subscribe decodes every delivery on subject and hands it to h as one
// event.
func (w *world) subscribe(bus *memhub.Bus, subject string, h func(m messages.Message)) {
	_, err := bus.Subscribe(subject, func(tm *transport.Msg) {
		if w.done || w.violation != nil {
			return // the run is over; the hub may still hold deliveries
		}
		m, err := messages.Decode(tm.Data)
		if err != nil {
			w.fail(InvWire, "%s: decode on %s: %v", bus.Node(), tm.Subject, err)
			w.event()
			return
		}
		w.eventLog.addDelivery(w.now(), routine(m), bus.Node(), m)
		h(m)
		w.event()
	})
	if err != nil {
		panic(fmt.Sprintf("sim: subscribe %s: %v", subject, err))
	}
}

// routine reports whether a delivery is a periodic report with nothing
// alarming in it (left out of violation traces, kept in the log).
func routine(m messages.Message) bool {
	switch v := m.(type) {
	case messages.EngineLoad, messages.EngineVersionAck, messages.MinVersionSet, messages.StepDone:
		return true
	case messages.EngineHealth:
		return v.Healthy && !v.Paused && !v.Updating
	}
	return false
}

// appendBrief appends a message's String without the long token lists.
func appendBrief(b []byte, m messages.Message) []byte {
	switch v := m.(type) {
	case messages.TurnRequest:
		// "TurnRequest traj=%s turn=%d engine=%s ctx=%d max=%d min_v=%d"
		b = append(append(b, "TurnRequest traj="...), v.TrajectoryID...)
		b = strconv.AppendInt(append(b, " turn="...), int64(v.TurnIndex), 10)
		b = append(append(b, " engine="...), v.Engine...)
		b = strconv.AppendInt(append(b, " ctx="...), int64(len(v.Tokens)), 10)
		b = strconv.AppendInt(append(b, " max="...), int64(v.MaxTokens), 10)
		return strconv.AppendInt(append(b, " min_v="...), v.Version, 10)
	case messages.TurnResult:
		// "TurnResult traj=%s turn=%d engine=%s tokens=%d v=%d..%d"
		lo, hi := versionSpan(v)
		b = append(append(b, "TurnResult traj="...), v.TrajectoryID...)
		b = strconv.AppendInt(append(b, " turn="...), int64(v.TurnIndex), 10)
		b = append(append(b, " engine="...), v.Engine...)
		b = strconv.AppendInt(append(b, " tokens="...), int64(len(v.Tokens)), 10)
		b = strconv.AppendInt(append(b, " v="...), lo, 10)
		return strconv.AppendInt(append(b, ".."...), hi, 10)
	}
	return append(b, m.String()...)
}

// run drives the loop until the run finishes or an invariant breaks.
func (w *world) run() {
	for !w.done {
		if w.violation != nil {
			return
		}
		if len(w.tmrs) == 0 {
			panic("sim: no timers left (heartbeats keep the loop alive)")
		}
		next := w.tmrs[0].at
		now := w.now()
		if w.hub.Pending() == 0 {
			w.hub.Advance(max(0, next-now))
		} else {
			w.hub.Advance(min(quantum, max(0, next-now)))
		}
		if w.violation != nil {
			return
		}
		for len(w.tmrs) > 0 && w.tmrs[0].at <= w.now() && !w.done {
			t := heap.Pop(&w.tmrs).(*timer)
			if t.label != "" {
				w.eventLog.addStrings(w.now(), t.routine, t.label)
			}
			t.fn()
			w.event()
			if w.violation != nil {
				return
			}
		}
	}
}

// newWorld builds a run: draws the workload and the fault schedule from
// the seed, connects every node to the hub and starts their timers.
func newWorld(cfg Config) (*world, error) {
	w := &world{cfg: cfg, rng: rand.New(rand.NewSource(cfg.Seed)), eventLog: newEventLog(cfg.TraceEvents)}
	w.wl = drawWorkload(w.rng, cfg)
	w.faults = drawFaults(w.rng, cfg, w.wl)
	w.xrng = rand.New(rand.NewSource(cfg.Seed ^ inputsSalt))
	w.in = drawInputs(w.xrng, cfg, &w.wl)
	w.faults.drawExtra(w.xrng, cfg, w.wl, w.in)
	w.faults.drawOutage(rand.New(rand.NewSource(cfg.Seed^outageSalt)), cfg, w.wl)
	w.hub = memhub.New(w.rng.Int63())
	w.hub.SetRecording(false) // the sim keeps its own log of every event
	w.store = newWeightStore()
	w.orc = newOracle(w)
	var err error
	if w.ctl, err = newCtl(w); err != nil {
		return nil, err
	}
	w.trainer = newTrainer(w)
	if w.pub, err = newPub(w); err != nil {
		return nil, err
	}
	for i := 0; i < w.wl.Engines; i++ {
		w.engines = append(w.engines, newEngine(w, i))
	}
	w.logf("start seed=%d scenario=%s %s faults=%d", cfg.Seed, cfg.Scenario, w.wl, len(w.faults.faults))
	w.logf("inputs %s", w.in)
	w.faults.schedule(w)
	w.ctl.start()
	w.trainer.start()
	w.pub.start()
	for _, e := range w.engines {
		e.start()
	}
	return w, nil
}

// finish is called when the last step completed: heal every fault, let
// the system settle for SyncBound+1s, then run the final checks.
func (w *world) finish() {
	if w.finished {
		return
	}
	w.finished = true
	w.faults.healAll(w)
	w.logf("all %d steps trained: faults healed, settling for %v", w.cfg.Steps, w.cfg.SyncBound+time.Second)
	w.after(w.cfg.SyncBound+time.Second, "final checks", func() {
		w.ctl.retire()
		if w.pub.down == 0 {
			w.logf("pub: the tracker ignored %d acks at or below an engine's version", w.pub.tr.IgnoredAcks())
		}
		w.orc.final()
		w.done = true
	})
}

var (
	groupRe  = regexp.MustCompile(`\bp\d+#\d+(?:@\d+)?\b`)
	engineRe = regexp.MustCompile(`\be\d+\b`)
)

// related is the causal slice of the log for a violation: every
// non-routine event naming the groups the detail names (or, when it names
// none, its engines), the last TraceEvents of them.
func (w *world) related(detail string) []string {
	keys := groupRe.FindAllString(detail, -1)
	if len(keys) == 0 {
		keys = engineRe.FindAllString(detail, -1)
	}
	if len(keys) == 0 {
		return nil
	}
	var out []string
	for _, l := range w.full() {
		for _, k := range keys {
			if strings.Contains(l, k) && !isRoutineLine(l) {
				out = append(out, l)
				break
			}
		}
	}
	if n := w.cfg.TraceEvents; len(out) > n {
		out = out[len(out)-n:]
	}
	return out
}

// isRoutineLine spots heartbeat and engine-step lines in the full log.
func isRoutineLine(l string) bool {
	for _, s := range []string{"<- EngineLoad", "<- EngineVersionAck", "<- MinVersionSet", "<- StepDone", " step batch=", " (retrying)"} {
		if strings.Contains(l, s) {
			return true
		}
	}
	return strings.Contains(l, "<- EngineHealth") && strings.Contains(l, "paused=false updating=false")
}

// hexsum is a short printable digest.
func hexsum(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }

// joinLines indents a trace.
func joinLines(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString("  ")
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}
