// Package scale is the scale benchmark of issue 22: the pipeline of
// `asyncrl run` (cluster/node, through its face) — the real rollout
// actors, router (actors/router/proxy), staleness controller, dynamic-
// sampling actor, trajectory buffer and trainer actor over an embedded
// NATS bus — with swapped parts (node.Options): built-in engines
// (engine.Engine on its latency model at a fast time scale, serving
// engine.HashModel so that compute is not what is measured), a no-op
// trainer Stepper (the real trainer actor, whose step trains nothing and
// whose versions are not published to the engines), a prompt source that
// ends, and timing wrappers around the router, rollout client, generator
// and trajectory buffer. It holds
// 1,024 → 8,192 → 32,768 → 131,072 multi-turn trajectories in flight and
// reports per level: errors, trajectories lost, RSS and goroutines per
// in-flight trajectory, router decision p50/p99, filter and controller
// event latency, bus messages/s and GC pause p99 (bench/cmd/scale, `make
// bench-scale`, BENCHMARKS.md "131,072 trajectories in one process").
//
// Transport "inproc" (the default) serves the router and the engines in
// process (internal/inproc, no socket); "tcp" reaches each over its
// loopback listener with the unbounded pools of before issue 22 (a
// connection per request in flight), and "tcp-bounded" with at most 1,024
// connections per engine and 4,096 to the router, for the before/after
// comparison. The router's decision time is measured on the in-process
// path only: over a socket the router's own front (router.front) serves
// it, unwrapped, and the decision figures read 0.
package scale

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors/rollout"
	"github.com/asyncrl/asyncrl/cluster/node"
	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/internal/inproc"
	"github.com/asyncrl/asyncrl/transport"
)

// Levels is the ramp of the issue.
var Levels = []int{1024, 8192, 32768, 131072}

// Options configure a run.
type Options struct {
	// Levels are the trajectories in flight to hold, in order; nil is Levels.
	Levels []int
	// MaxLevel drops the levels above it (0: none).
	MaxLevel int
	// NSamples is the group size n (default 8).
	NSamples int
	// Rounds: each level admits Rounds × level/n groups in all (default 1.5),
	// so every slot is refilled about once after the ramp.
	Rounds float64
	// Task is the environment (default gridwalk, multi-turn); MaxTurns caps
	// its turns (default 4).
	Task     string
	MaxTurns int
	// SeqsPerEngine is each engine's max_num_seqs (default 256); Engines
	// is the engine count (0: level/4096, at least 2).
	SeqsPerEngine, Engines int
	// TimeScale scales the latency model's step durations; 0 (the
	// default) picks one per level, TimeScaleFor.
	TimeScale float64
	// Transport is "inproc" (default), "tcp" or "tcp-bounded".
	Transport string
	// ControllerMailbox is the controller shell's MailboxCapacity (0: the
	// default 1,024); a small one overloads it on purpose: its subject
	// bridges then wait for room (MailboxWaits) and nothing may be lost.
	ControllerMailbox int
	// StoreConcurrency is each rollout actor's bound on stores waiting on
	// the trajectory buffer (cluster/node's Options.StoreConcurrency); 0 is
	// rollout's default, 32.
	StoreConcurrency int
	// Timeout bounds one level (default 15 min).
	Timeout time.Duration
	// StartHold, when > 0, is a start barrier: the engines hold every
	// request (paused over their HTTP API, POST /pause?mode=wait, which
	// keeps them healthy; POST /resume releases) until
	// the whole level is in flight, or StartHold passed, and then release
	// them together. Without it, on a loaded 2-core machine the level's
	// first trajectories can finish before its last ones started, and the
	// peak in flight lands anywhere from 70 to 99 % of the level from run
	// to run (BENCHMARKS.md "131,072 again"). 0: no hold.
	StartHold time.Duration
	// HeapProfile, when set, is where the heap profile at the peak of the
	// largest level is written.
	HeapProfile string
	// CPUProfile, when set, is where the CPU profile of the largest
	// level is written.
	CPUProfile string
	// MutexProfile, when set, is where the mutex contention profile of the
	// largest level is written.
	MutexProfile string
	// Logger gets the components' warnings (default: none).
	Logger zerolog.Logger
	// Progress, when set, gets one line per second while a level runs.
	Progress func(string)
}

// TimeScaleFor is the latency model's time scale at level n: TimeScale
// when set, else 0.8 × n/131,072 and at least 0.02. A level passes only
// when ≥ 95 % of it is in flight at once, and starting n trajectories
// takes time proportional to n; with one fixed scale, a quiet machine
// finished the first trajectories of 32,768 before the last had started
// (70 % at 0.02) while 0.2 held 98.6 %. Scaling the turns with the level
// keeps a trajectory's length in proportion to the ramp.
func (o *Options) TimeScaleFor(n int) float64 {
	if o.TimeScale > 0 {
		return o.TimeScale
	}
	return max(0.02, 0.8*float64(n)/131072)
}

func (o *Options) defaults() {
	if o.Levels == nil {
		o.Levels = Levels
	}
	if o.NSamples <= 0 {
		o.NSamples = 8
	}
	if o.Rounds <= 0 {
		o.Rounds = 1.5
	}
	if o.Task == "" {
		o.Task = "gridwalk"
	}
	if o.MaxTurns <= 0 {
		o.MaxTurns = 4
	}
	if o.SeqsPerEngine <= 0 {
		o.SeqsPerEngine = 256
	}
	if o.Transport == "" {
		o.Transport = "inproc"
	}
	if o.Timeout <= 0 {
		o.Timeout = 15 * time.Minute
	}
}

// Result is one level's figures.
type Result struct {
	Level     int    `json:"level"`
	Transport string `json:"transport"`
	Engines   int    `json:"engines"`
	// TimeScale is the latency model's time scale the level ran at.
	TimeScale float64 `json:"time_scale"`
	// HoldSeconds is how long the start barrier held the engines (0: no
	// hold); Seconds includes it.
	HoldSeconds float64 `json:"hold_seconds"`
	// PeakInFlight is the most trajectories started and not finished at once.
	PeakInFlight int64 `json:"peak_in_flight"`
	// Started, Finished, Aborted are the rollout actors' trajectories.
	Started, Finished, Aborted int64
	// Errors: aborted trajectories, router errors answered to the rollout
	// actors, groups not stored, and a level that did not settle.
	Errors int64 `json:"errors"`
	// Lost: trajectories with no outcome at the end (started − finished −
	// aborted, plus the controller's groups still running × n).
	Lost int64 `json:"lost"`
	// Groups: admitted by the controller, judged (kept + filtered), trained
	// steps.
	GroupsAdmitted, GroupsKept, GroupsFiltered, Steps int64
	Turns                                             int64   `json:"turns"`
	Seconds                                           float64 `json:"seconds"`
	RSSBaseMB, RSSPeakMB                              float64
	RSSPerTrajectoryKB                                float64 `json:"rss_per_trajectory_kb"`
	HeapPerTrajectoryKB                               float64 `json:"heap_per_trajectory_kb"`
	GoroutinesPeak                                    int     `json:"goroutines_peak"`
	GoroutinesPerTrajectory                           float64 `json:"goroutines_per_trajectory"`
	FDsPeak                                           int     `json:"fds_peak"`
	RouterDecisionP50ms, RouterDecisionP99ms          float64
	FilterEventP50ms, FilterEventP99ms                float64
	ControllerEventP50ms, ControllerEventP99ms        float64
	BusMsgsPerSec                                     float64 `json:"bus_msgs_per_sec"`
	GCPauseP99ms                                      float64 `json:"gc_pause_p99_ms"`
	InProcRequests, NetRequests                       int64
	// MailboxDrops counts messages the actor shells refused (mailbox
	// full); each is an error.
	MailboxDrops int64 `json:"mailbox_drops"`
	// MailboxWaits counts bus messages a bridge held back until a full
	// mailbox had room (admission slowed, nothing lost); MailboxWaitSeconds
	// is the time spent waiting.
	MailboxWaits       int64   `json:"mailbox_waits"`
	MailboxWaitSeconds float64 `json:"mailbox_wait_seconds"`
	// SlowConsumerDrops counts what NATS dropped past a subscription's
	// pending limits; each is an error.
	SlowConsumerDrops int64 `json:"slow_consumer_drops"`
	// StoreRetries counts trajectory-buffer stores that timed out or
	// failed and were tried again (not errors: the group id de-duplicates).
	StoreRetries int64 `json:"store_retries"`
	// BufferMsgs and BufferMB are what the trajectory buffer (a JetStream
	// stream in memory) still held when the level settled, every group
	// judged: messages the buffer keeps after the sampling actor acked them.
	BufferMsgs uint64  `json:"buffer_msgs"`
	BufferMB   float64 `json:"buffer_mb"`
	// Failure says why the level failed (empty: it passed).
	Failure string `json:"failure,omitempty"`
}

// Run runs every level in turn; it stops at the first level that fails
// and returns what it measured up to there.
func Run(ctx context.Context, o Options) ([]Result, error) {
	o.defaults()
	var out []Result
	for i, l := range o.Levels {
		if o.MaxLevel > 0 && l > o.MaxLevel {
			break
		}
		lo := o
		if i != len(o.Levels)-1 && !(o.MaxLevel > 0 && nextAbove(o.Levels, i, o.MaxLevel)) {
			lo.HeapProfile, lo.CPUProfile, lo.MutexProfile = "", "", "" // the profiles are of the largest level run
		}
		r, err := RunLevel(ctx, lo, l)
		out = append(out, r)
		if o.Progress != nil {
			o.Progress(Table([]Result{r}))
		}
		if err != nil {
			return out, err
		}
		if r.Failure != "" {
			return out, fmt.Errorf("scale: level %d: %s", l, r.Failure)
		}
	}
	return out, nil
}

// nextAbove: level i is the last one not above max.
func nextAbove(ls []int, i, maxLevel int) bool { return i+1 >= len(ls) || ls[i+1] > maxLevel }

// level is one level's running pipeline.
type level struct {
	o   Options
	n   int
	run string
	// node is the level's pipeline (cluster/node's face); it owns the
	// engines once started (owned), started: its Start returned.
	node           *node.Node
	owned, started bool
	dataDir        string
	engs           []*engine.Engine
	subs           []transport.Subscription
	engTr, cliTr   *inproc.Transport
	// held: the engines are paused for the start barrier.
	held bool

	decisions, filterLat, ctlLat durations
	stored, verdict              sync.Map // group id → time.Time
	kept, filtered, admitted     atomic.Int64
	// requeued counts the controller's requeues (ledger), reconsumed the
	// re-admissions of requeued prompts (attempt > 0): while they differ a
	// requeued prompt is still to be assigned again.
	requeued, reconsumed atomic.Int64
	// settleKey and settleAt: settled's counters, and since when they hold.
	settleKey         [5]int64
	settleAt          time.Time
	routerErrs, turns atomic.Int64
	src               *source
	stopped           bool
	sessions          *sessionCounter
}

// sessionCounter counts the trajectories in flight exactly: from a
// session's first turn to its FinishSession (which every episode sends).
type sessionCounter struct {
	rollout.Generator
	mu   sync.Mutex
	live map[string]struct{}
	peak int
}

func (s *sessionCounter) Generate(ctx context.Context, req rollout.TurnRequest) (rollout.TurnOutput, error) {
	s.mu.Lock()
	if _, ok := s.live[req.SessionID]; !ok {
		s.live[req.SessionID] = struct{}{}
		s.peak = max(s.peak, len(s.live))
	}
	s.mu.Unlock()
	return s.Generator.Generate(ctx, req)
}

func (s *sessionCounter) FinishSession(ctx context.Context, id string) error {
	s.mu.Lock()
	delete(s.live, id)
	s.mu.Unlock()
	return s.Generator.FinishSession(ctx, id)
}

func (s *sessionCounter) peakInFlight() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(s.peak)
}

// RunLevel starts a fresh pipeline, holds n trajectories in flight until
// Rounds × n/NSamples groups were judged, stops it and reports.
func RunLevel(ctx context.Context, o Options, n int) (Result, error) {
	o.defaults()
	res := Result{Level: n, Transport: o.Transport, TimeScale: o.TimeScaleFor(n)}
	runtime.GC()
	debug.FreeOSMemory()
	b := baseline{rss: RSSBytes(), goroutines: runtime.NumGoroutine()}
	runtime.ReadMemStats(&b.mem)
	l := &level{o: o, n: n, run: "scale" + strconv.Itoa(n)}
	defer l.stop()
	if err := l.start(ctx); err != nil {
		return res, err
	}
	res.Engines = len(l.engs)
	stopProfiles, err := startProfiles(o)
	if err != nil {
		return res, err
	}
	defer stopProfiles()
	b.pauses, b.msgs = gcPauses(), l.node.BusOutMsgs()
	// start paused the engines before the controller admitted anything.
	w := &levelWatch{start: time.Now(), holding: l.held, lastProgress: time.Now()}
	deadline := time.NewTimer(o.Timeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !l.settled() && res.Failure == "" {
		select {
		case <-ctx.Done():
			res.Failure = "interrupted"
		case <-deadline.C:
			res.Failure = fmt.Sprintf("did not settle within %v", o.Timeout)
		case <-tick.C:
			if err := l.observe1(ctx, w, &res); err != nil {
				return res, err
			}
		}
	}
	l.result(&res, w, b)
	return res, nil
}

// baseline is the process before a level: what its figures are relative to.
type baseline struct {
	rss        int64
	goroutines int
	mem        runtime.MemStats
	pauses     *metrics.Float64Histogram
	msgs       uint64
}

// levelWatch is what RunLevel's loop keeps between two looks at the level.
type levelWatch struct {
	start        time.Time
	holding      bool // the engines are paused for the start barrier
	pk           peaks
	heapAtPeak   uint64
	profiled     bool
	lastProgress time.Time
}

// startProfiles starts the mutex and CPU profiles Options asks for; stop
// writes them.
func startProfiles(o Options) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	if o.MutexProfile != "" {
		runtime.SetMutexProfileFraction(10)
		stops = append(stops, func() {
			runtime.SetMutexProfileFraction(0)
			if f, err := os.Create(o.MutexProfile); err == nil {
				_ = pprof.Lookup("mutex").WriteTo(f, 0)
				f.Close()
			}
		})
	}
	if o.CPUProfile != "" {
		f, err := os.Create(o.CPUProfile)
		if err != nil {
			stop()
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			stop()
			return nil, err
		}
		stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
	}
	return stop, nil
}

// observe1 is one look at the level: the heap at the peak (and its
// profile), the peaks, the end of the start barrier, a progress line. A
// failure to release the barrier is the level's failure; an error is the
// benchmark's.
func (l *level) observe1(ctx context.Context, w *levelWatch, res *Result) error {
	o, n := l.o, l.n
	st := l.stats()
	inFlight := st.Started - st.Finished - st.Aborted
	if inFlight > w.pk.inFlight && inFlight >= int64(float64(n)*0.95) && !w.profiled {
		// At the peak: the heap that holds the trajectories in flight.
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		w.heapAtPeak = ms.HeapInuse + ms.StackInuse
		if o.HeapProfile != "" {
			if err := writeHeap(o.HeapProfile); err != nil {
				return err
			}
		}
		w.profiled = true
	}
	w.pk.sample(inFlight)
	if w.holding && (inFlight >= int64(n) || time.Since(w.start) >= o.StartHold) {
		if err := l.release(ctx); err != nil {
			res.Failure = err.Error()
			return nil
		}
		w.holding = false
		res.HoldSeconds = time.Since(w.start).Seconds()
	}
	if o.Progress != nil && time.Since(w.lastProgress) >= time.Second {
		w.lastProgress = time.Now()
		o.Progress(fmt.Sprintf("level %d: %.0fs in flight %d (peak %d) finished %d aborted %d judged %d/%d rss %.0f MB goroutines %d fds %d",
			n, time.Since(w.start).Seconds(), inFlight, w.pk.inFlight, st.Finished, st.Aborted, l.kept.Load()+l.filtered.Load(),
			l.src.total, float64(RSSBytes())/(1<<20), runtime.NumGoroutine(), openFDs()))
	}
	return nil
}

// result fills res once the level settled (or failed): its rates, peaks
// and latencies, then stops the pipeline (finish) and judges it.
func (l *level) result(res *Result, w *levelWatch, b baseline) {
	n, pk := l.n, w.pk
	res.Seconds = time.Since(w.start).Seconds()
	msgs := l.node.BusOutMsgs() - b.msgs
	res.BusMsgsPerSec = float64(msgs) / res.Seconds
	res.GCPauseP99ms = pauseQuantile(b.pauses, gcPauses(), 0.99) * 1000
	res.PeakInFlight = max(pk.inFlight, l.sessions.peakInFlight())
	res.RSSBaseMB, res.RSSPeakMB = float64(b.rss)/(1<<20), float64(pk.rss)/(1<<20)
	res.GoroutinesPeak, res.FDsPeak = pk.goroutines, pk.fds
	if pk.inFlight > 0 {
		res.RSSPerTrajectoryKB = float64(pk.rss-b.rss) / 1024 / float64(pk.inFlight)
		res.GoroutinesPerTrajectory = float64(pk.goroutines-b.goroutines) / float64(pk.inFlight)
		if w.heapAtPeak > 0 {
			res.HeapPerTrajectoryKB = (float64(w.heapAtPeak) - float64(b.mem.HeapInuse+b.mem.StackInuse)) / 1024 / float64(pk.inFlight)
		}
	}
	res.RouterDecisionP50ms, res.RouterDecisionP99ms, _ = l.decisions.quantiles()
	res.FilterEventP50ms, res.FilterEventP99ms, _ = l.filterLat.quantiles()
	res.ControllerEventP50ms, res.ControllerEventP99ms, _ = l.ctlLat.quantiles()
	if l.engTr != nil {
		es, cs := l.engTr.Stats(), l.cliTr.Stats()
		res.InProcRequests, res.NetRequests = es.Served+cs.Served, es.Passed+cs.Passed
	}
	res.BufferMsgs, res.BufferMB = l.bufferHeld()
	l.finish(res)
	if res.Failure == "" && (res.Errors > 0 || res.Lost > 0) {
		res.Failure = fmt.Sprintf("%d errors, %d trajectories lost", res.Errors, res.Lost)
	}
	// The level's groups are all admitted at its start, but on a loaded
	// 2-core machine the first trajectories can finish before the last
	// ones started, so the peak may fall a little short of the level.
	if res.Failure == "" && res.PeakInFlight < int64(n)*95/100 {
		res.Failure = fmt.Sprintf("peak in flight %d < 95%% of %d", res.PeakInFlight, n)
	}
}

// bufferHeld is what the trajectory buffer (JetStream, in memory) holds
// (0, 0 if it cannot be read).
func (l *level) bufferHeld() (uint64, float64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	msgs, bytes, err := l.node.GroupStreamHeld(ctx)
	if err != nil {
		return 0, 0
	}
	return msgs, float64(bytes) / (1 << 20)
}

func writeHeap(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
