// Package scale is the scale benchmark of issue 22: the real rollout
// actors, router (actors/router/proxy), staleness controller, dynamic-
// sampling actor and built-in engines (engine.Engine on its latency model
// at a fast time scale, serving engine.HashModel so that compute is not
// what is measured) in one process, over an embedded NATS bus, with a
// no-op trainer Stepper (the real trainer actor, whose step trains
// nothing and whose versions are not published to the engines). It holds
// 1,024 → 8,192 → 32,768 → 131,072 multi-turn trajectories in flight and
// reports per level: errors, trajectories lost, RSS and goroutines per
// in-flight trajectory, router decision p50/p99, filter and controller
// event latency, bus messages/s and GC pause p99 (bench/cmd/scale, `make
// bench-scale`, BENCHMARKS.md "131,072 trajectories in one process").
//
// Transport "inproc" (the default) serves the router and the engines in
// process (internal/inproc, no socket); "tcp" puts each behind a loopback
// listener with the unbounded pools of before issue 22 (a connection per
// request in flight), and "tcp-bounded" with at most 1,024 connections per
// engine and 4,096 to the router, for the before/after comparison.
package scale

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors"
	"github.com/asyncrl/asyncrl/actors/controller"
	"github.com/asyncrl/asyncrl/actors/filter"
	"github.com/asyncrl/asyncrl/actors/rollout"
	"github.com/asyncrl/asyncrl/actors/router/proxy"
	"github.com/asyncrl/asyncrl/actors/sampling"
	"github.com/asyncrl/asyncrl/actors/staleness"
	"github.com/asyncrl/asyncrl/actors/trainer"
	"github.com/asyncrl/asyncrl/actors/trainer/microbatch"
	"github.com/asyncrl/asyncrl/cluster/rollouthost"
	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/engine/driver"
	"github.com/asyncrl/asyncrl/engine/latency"
	"github.com/asyncrl/asyncrl/internal/inproc"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/policy"
	"github.com/asyncrl/asyncrl/tasks"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
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
	// the trajectory buffer (0: rollout's default, 32).
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
	o      Options
	n      int
	run    string
	bus    *natsbus.Bus
	groups transport.Stream // the trajectory buffer
	sys    *actors.System
	engs   []*engine.Engine
	srvs   []*http.Server
	router *proxy.Router
	ctl    *controller.Actor
	smp    *sampling.Actor
	tr     *trainer.Actor
	ros    []*rollout.Actor
	subs   []transport.Subscription
	client *http.Client
	engTr  *inproc.Transport
	cliTr  *inproc.Transport
	// drivers drive the engines over their HTTP API (the start barrier's
	// pause and resume, as weight sync drives any vLLM); held: paused now.
	drivers []driver.Driver
	held    bool

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
	reg               *prometheus.Registry
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

// subjects of the level's run (cluster/node's plan).
type subjects struct{ prompts, groupsReady, aborted, groups, kept, filtered, train, steps, weights, capacity, ledger, settled string }

func subjectsOf(run string) subjects {
	m := transport.MustSubject
	return subjects{
		prompts: m(run, transport.TopicPrompts), groupsReady: m(run, transport.TopicTrajectories),
		aborted: m(run, transport.TopicTrajectories, "aborted"), groups: m(run, transport.TopicGroups) + ".>",
		kept: m(run, transport.TopicGroups, "kept"), filtered: m(run, transport.TopicGroups, "filtered"),
		train: m(run, transport.TopicTrain), steps: m(run, transport.TopicSteps), weights: m(run, transport.TopicWeights),
		capacity: m(run, transport.TopicCapacity), ledger: m(run, transport.TopicLedger), settled: m(run, transport.TopicLedger, "groups"),
	}
}

// RunLevel starts a fresh pipeline, holds n trajectories in flight until
// Rounds × n/NSamples groups were judged, stops it and reports.
func RunLevel(ctx context.Context, o Options, n int) (Result, error) {
	o.defaults()
	res := Result{Level: n, Transport: o.Transport, TimeScale: o.TimeScaleFor(n)}
	runtime.GC()
	debug.FreeOSMemory()
	base := RSSBytes()
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	g0 := runtime.NumGoroutine()
	l := &level{o: o, n: n, run: "scale" + strconv.Itoa(n)}
	defer l.stop()
	if err := l.start(ctx); err != nil {
		return res, err
	}
	res.Engines = len(l.engs)
	if o.MutexProfile != "" {
		runtime.SetMutexProfileFraction(10)
		defer func() {
			runtime.SetMutexProfileFraction(0)
			if f, err := os.Create(o.MutexProfile); err == nil {
				_ = pprof.Lookup("mutex").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	if o.CPUProfile != "" {
		f, err := os.Create(o.CPUProfile)
		if err != nil {
			return res, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return res, err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	p0 := gcPauses()
	msgs0 := l.bus.Conn().Stats().OutMsgs
	start := time.Now()
	holding := l.held // start paused the engines before the controller admitted anything
	pk := peaks{}
	var heapAtPeak uint64
	profiled := false
	deadline := time.NewTimer(o.Timeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastProgress := time.Now()
	for !l.settled() {
		select {
		case <-ctx.Done():
			res.Failure = "interrupted"
		case <-deadline.C:
			res.Failure = fmt.Sprintf("did not settle within %v", o.Timeout)
		case <-tick.C:
		}
		if res.Failure != "" {
			break
		}
		st := l.stats()
		inFlight := st.Started - st.Finished - st.Aborted
		if inFlight > pk.inFlight && inFlight >= int64(float64(n)*0.95) && !profiled {
			// At the peak: the heap that holds the trajectories in flight.
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			heapAtPeak = ms.HeapInuse + ms.StackInuse
			if o.HeapProfile != "" {
				if err := writeHeap(o.HeapProfile); err != nil {
					return res, err
				}
			}
			profiled = true
		}
		pk.sample(inFlight)
		if holding && (inFlight >= int64(n) || time.Since(start) >= o.StartHold) {
			if err := l.release(ctx); err != nil {
				res.Failure = err.Error()
				break
			}
			holding = false
			res.HoldSeconds = time.Since(start).Seconds()
		}
		if o.Progress != nil && time.Since(lastProgress) >= time.Second {
			lastProgress = time.Now()
			o.Progress(fmt.Sprintf("level %d: %.0fs in flight %d (peak %d) finished %d aborted %d judged %d/%d rss %.0f MB goroutines %d fds %d",
				n, time.Since(start).Seconds(), inFlight, pk.inFlight, st.Finished, st.Aborted, l.kept.Load()+l.filtered.Load(),
				l.src.total, float64(RSSBytes())/(1<<20), runtime.NumGoroutine(), openFDs()))
		}
	}
	res.Seconds = time.Since(start).Seconds()
	msgs := l.bus.Conn().Stats().OutMsgs - msgs0
	res.BusMsgsPerSec = float64(msgs) / res.Seconds
	res.GCPauseP99ms = pauseQuantile(p0, gcPauses(), 0.99) * 1000
	res.PeakInFlight = max(pk.inFlight, l.sessions.peakInFlight())
	res.RSSBaseMB, res.RSSPeakMB = float64(base)/(1<<20), float64(pk.rss)/(1<<20)
	res.GoroutinesPeak, res.FDsPeak = pk.goroutines, pk.fds
	if pk.inFlight > 0 {
		res.RSSPerTrajectoryKB = float64(pk.rss-base) / 1024 / float64(pk.inFlight)
		res.GoroutinesPerTrajectory = float64(pk.goroutines-g0) / float64(pk.inFlight)
		if heapAtPeak > 0 {
			res.HeapPerTrajectoryKB = (float64(heapAtPeak) - float64(ms0.HeapInuse+ms0.StackInuse)) / 1024 / float64(pk.inFlight)
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
	l.finish(&res)
	if res.Failure == "" && (res.Errors > 0 || res.Lost > 0) {
		res.Failure = fmt.Sprintf("%d errors, %d trajectories lost", res.Errors, res.Lost)
	}
	// The level's groups are all admitted at its start, but on a loaded
	// 2-core machine the first trajectories can finish before the last
	// ones started, so the peak may fall a little short of the level.
	if res.Failure == "" && res.PeakInFlight < int64(n)*95/100 {
		res.Failure = fmt.Sprintf("peak in flight %d < 95%% of %d", res.PeakInFlight, n)
	}
	return res, nil
}

// bufferHeld reads the trajectory buffer's message count and bytes from
// JetStream (0, 0 if it cannot be read).
func (l *level) bufferHeld() (uint64, float64) {
	js, err := jetstream.New(l.bus.Conn())
	if err != nil {
		return 0, 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, l.groups.Name())
	if err != nil {
		return 0, 0
	}
	info := st.CachedInfo()
	return info.State.Msgs, float64(info.State.Bytes) / (1 << 20)
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

// source hands out total prompts of the task, then none.
type source struct {
	task  tasks.Task
	rng   *rand.Rand
	total int64
	n     atomic.Int64
}

func (s *source) Next() (controller.Prompt, bool) {
	if s.n.Load() >= s.total {
		return controller.Prompt{}, false
	}
	k := s.n.Add(1)
	p := s.task.Sample(s.rng)
	return controller.Prompt{ID: rollout.PromptID("p"+strconv.FormatInt(k, 10), p.Seed), Text: p.Text}, true
}

// noopStepper is a trainer that trains nothing: each step returns the same
// tiny model at the next version.
type noopStepper struct {
	m *policy.Model
	v atomic.Int64
}

func (s *noopStepper) Version() int64 { return s.v.Load() }
func (s *noopStepper) Step(context.Context, trainer.Prepared) (policy.StepStats, trainer.Weights, error) {
	s.v.Add(1)
	return policy.StepStats{}, trainer.InMemory(s.m), nil
}

// noopPublisher publishes nothing (the engines keep version 0).
type noopPublisher struct{}

func (noopPublisher) Publish(context.Context, trainer.Weights, int64) error { return nil }

type startKey struct{}

// arrival is when the router got a request; timed marks the first
// upstream call (a retry is not a decision of the request's own).
type arrival struct {
	at    time.Time
	timed atomic.Bool
}

// timed stamps each router request with its arrival, so the engine-bound
// transport can time the router's decision (body read, session key,
// routing core) up to the upstream call.
func timed(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), startKey{}, &arrival{at: time.Now()})))
	})
}

type decisionTimer struct {
	base http.RoundTripper
	d    *durations
}

func (t decisionTimer) RoundTrip(r *http.Request) (*http.Response, error) {
	if a, ok := r.Context().Value(startKey{}).(*arrival); ok && !a.timed.Swap(true) {
		t.d.add(time.Since(a.at))
	}
	return t.base.RoundTrip(r)
}

// countingClient counts the router's non-200 answers to the rollout actors.
type countingClient struct {
	base http.RoundTripper
	l    *level
}

func (c countingClient) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	if strings.HasSuffix(r.URL.Path, "/completions") {
		c.l.turns.Add(1)
		if err != nil || resp.StatusCode != http.StatusOK {
			c.l.routerErrs.Add(1)
		}
	}
	return resp, err
}

// netTransport is the socket path: pooled, bounded per host.
func netTransport(maxConns int) *http.Transport {
	return &http.Transport{Proxy: nil, MaxIdleConns: maxConns, MaxIdleConnsPerHost: maxConns, MaxConnsPerHost: maxConns,
		DisableCompression: true, IdleConnTimeout: 90 * time.Second}
}

func (l *level) start(ctx context.Context) error {
	o := l.o
	s := subjectsOf(l.run)
	var err error
	bopts := natsbus.DefaultOptions()
	bopts.MaxPayload = 64 << 20
	bopts.Name = "asyncrl-" + l.run
	if l.bus, err = natsbus.Connect(ctx, bopts); err != nil {
		return fmt.Errorf("scale: bus: %w", err)
	}
	groups, err := l.bus.Stream(ctx, rollouthost.GroupStream(l.run, s.groupsReady, 1))
	if err != nil {
		return fmt.Errorf("scale: trajectory buffer: %w", err)
	}
	l.groups = groups
	if err := l.startEngines(); err != nil {
		return err
	}
	routerURL, err := l.startRouter()
	if err != nil {
		return err
	}
	// The start barrier closes before the controller admits the first
	// group: paused later, the first trajectories could finish before the
	// last started, and the level never came to be in flight at once
	// (seen under go test ./... load: held to the cap).
	if _, err := l.hold(ctx); err != nil {
		return err
	}
	l.reg = prometheus.NewRegistry()
	if l.sys, err = actors.NewSystem(actors.SystemConfig{Logger: o.Logger, RunID: l.run, Registerer: l.reg}); err != nil {
		return err
	}
	if err := l.observe(s); err != nil {
		return err
	}
	w := max(1, l.n/o.NSamples)
	b := max(1, w/64)
	fcfg := filter.Config{Mode: filter.ModeFilter, TrainBatchSize: b, NSamplesPerPrompt: o.NSamples, MaxSampleBatches: -1,
		MinReplaceRatio: 0.3, ZeroVarianceTol: 1e-6}
	// The shells as asyncrl run configures them (mailboxes of 1,024); a
	// refused message is counted in MailboxDrops.
	if l.smp, err = sampling.Spawn(l.sys, l.bus, actors.DefaultShellConfig("sampling-0", "sampling"),
		sampling.Config{Filter: fcfg, RunID: l.run, Sender: "sampling-0", Kept: s.kept, Filtered: s.filtered}, s.groupsReady, groups); err != nil {
		return err
	}
	task, err := tasks.Get(o.Task)
	if err != nil {
		return err
	}
	pm, err := policy.New(policy.DefaultConfig(), 1)
	if err != nil {
		return err
	}
	if l.tr, err = trainer.StartStepper(l.bus, &noopStepper{m: pm}, noopPublisher{}, trainer.Config{RunID: l.run, Name: "trainer-0",
		NormStd: true, Microbatch: microbatch.DefaultConfig(), Logger: o.Logger,
		Subjects: trainer.Subjects{Train: s.train, Steps: s.steps, Weights: s.weights}}); err != nil {
		return err
	}
	total := int64(o.Rounds * float64(w))
	l.src = &source{task: task, rng: rand.New(rand.NewPCG(uint64(l.n), 7)), total: total}
	ccfg := controller.Config{
		Staleness: staleness.Config{MaxStalenessSteps: int64(w/b - 1), NumParallelGenerationWorkers: int64(w), MiniBatchSize: int64(b),
			StalePolicy: staleness.PolicyRequeue},
		Sampling: fcfg, RunID: l.run, Sender: "controller-0", Task: task.Name(), NSamples: o.NSamples, ResendTrainAfter: time.Minute,
		Subjects: controller.Subjects{Prompts: s.prompts, Train: s.train, Capacity: s.capacity, Ledger: s.ledger, Settled: s.settled},
	}
	return l.startRollouts(s, groups, task, routerURL, ccfg)
}

func (l *level) startRollouts(s subjects, groups transport.Stream, task tasks.Task, routerURL string, ccfg controller.Config) error {
	o := l.o
	ecfg := rollout.DefaultEpisodeConfig()
	ecfg.MaxTurns = o.MaxTurns
	ecfg.MaxSeqLen = policy.DefaultConfig().MaxSeqLen
	ecfg.TurnTimeout = o.Timeout // a turn may queue behind the whole level
	gen := &sessionCounter{Generator: &rollout.HTTPClient{BaseURL: routerURL, Model: "asyncrl-policy", Client: l.client}, live: map[string]struct{}{}}
	l.sessions = gen
	// Twice the slots of the level: prompts reach the actors through a
	// queue group, not evenly.
	const conc = 4096
	for i := range (2*l.n + conc - 1) / conc {
		a, err := rollout.Start(l.bus, gen, rollout.Config{RunID: l.run, Name: "rollout-" + strconv.Itoa(i), Task: task, Episode: ecfg,
			Concurrency: conc, Logger: o.Logger, GroupStream: timedStream{Stream: groups, l: l}, StoreConcurrency: o.StoreConcurrency,
			Subjects: rollout.Subjects{Prompts: s.prompts, Groups: s.groupsReady, Aborted: s.aborted}})
		if err != nil {
			return err
		}
		l.ros = append(l.ros, a)
	}
	var err error
	ctlShell := actors.DefaultShellConfig("controller-0", "controller")
	if o.ControllerMailbox > 0 {
		ctlShell.MailboxCapacity = o.ControllerMailbox
	}
	l.ctl, err = controller.Spawn(l.sys, l.bus, ctlShell, ccfg, controller.Inputs{Aborted: s.aborted, Groups: s.groups, Steps: s.steps}, func() controller.Source { return l.src })
	return err
}

func (l *level) startEngines() error {
	o := l.o
	count := o.Engines
	if count <= 0 {
		count = max(2, l.n/4096)
	}
	for i := range count {
		cfg := engine.DefaultConfig()
		cfg.TimeScale = o.TimeScaleFor(l.n)
		cfg.MaxModelLen = policy.DefaultConfig().MaxSeqLen
		cfg.Seed = uint64(i)
		cfg.Latency = latency.DefaultConfig()
		cfg.Latency.MaxNumSeqs = o.SeqsPerEngine
		cfg.Latency.MaxWaiting = l.n + 1024 // every trajectory may queue on one engine
		e, err := engine.New(cfg, engine.NewHashModel(uint64(i)+1))
		if err != nil {
			return err
		}
		l.engs = append(l.engs, e)
	}
	return nil
}

// serve makes h reachable: in process under a fixed name, or on a
// loopback listener; it returns the base URL.
func (l *level) serve(name string, h http.Handler, reg *inproc.Registry) (string, error) {
	if l.o.Transport == "inproc" {
		u := "http://" + name + "." + l.run + ".inproc:80"
		reg.Register(u, h)
		return u, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	l.srvs = append(l.srvs, srv)
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), nil
}

func (l *level) startRouter() (string, error) {
	reg := &inproc.Registry{}
	var urls []string
	for i, e := range l.engs {
		u, err := l.serve("engine-"+strconv.Itoa(i), e.Handler(), reg)
		if err != nil {
			return "", err
		}
		urls = append(urls, u)
	}
	rcfg := proxy.DefaultConfig()
	rcfg.Replicas = urls
	rcfg.Logger = l.o.Logger
	var engTr, cliTr http.RoundTripper = netTransport(1024), netTransport(4096)
	if l.o.Transport == "tcp" {
		// As before issue 22: pooled, but one connection per request in flight.
		engTr = &http.Transport{Proxy: nil, MaxIdleConns: 1024, MaxIdleConnsPerHost: 256, DisableCompression: true}
		cliTr = &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 256}
	}
	if l.o.Transport == "inproc" {
		l.engTr = &inproc.Transport{Registry: reg, Base: engTr}
		l.cliTr = &inproc.Transport{Registry: reg, Base: cliTr}
		engTr, cliTr = l.engTr, l.cliTr
	}
	rcfg.Transport = decisionTimer{base: engTr, d: &l.decisions}
	var err error
	if l.router, err = proxy.New(rcfg); err != nil {
		return "", err
	}
	u, err := l.serve("router", timed(l.router.Handler()), reg)
	if err != nil {
		return "", err
	}
	l.client = &http.Client{Transport: countingClient{base: cliTr, l: l}}
	// The engines' control calls get their own client, out of the turn
	// and request counts.
	ctlTr := http.RoundTripper(netTransport(len(urls)))
	if l.o.Transport == "inproc" {
		ctlTr = &inproc.Transport{Registry: reg, Base: ctlTr}
	}
	for _, eu := range urls {
		d, err := driver.New(driver.KindBuiltin, eu, driver.Options{Client: &http.Client{Transport: ctlTr}})
		if err != nil {
			return "", err
		}
		l.drivers = append(l.drivers, d)
	}
	return u, nil
}

// timedStream records when each group was stored in the trajectory buffer.
type timedStream struct {
	transport.Stream
	l *level
}

func (t timedStream) PublishMsgID(ctx context.Context, subject, id string, data []byte) (uint64, error) {
	p, ok := t.Stream.(interface {
		PublishMsgID(ctx context.Context, subject, id string, data []byte) (uint64, error)
	})
	var seq uint64
	var err error
	if ok {
		seq, err = p.PublishMsgID(ctx, subject, id, data)
	} else {
		seq, err = t.Stream.Publish(ctx, subject, data)
	}
	if err == nil {
		t.l.stored.Store(id, time.Now())
	}
	return seq, err
}

// observe times the filter's verdicts (stored → kept/filtered) and the
// controller's handling of filtered groups (GroupFiltered → its ledger
// entry), and counts admissions.
func (l *level) observe(s subjects) error {
	verdict := func(counter *atomic.Int64, kept bool) transport.Handler {
		return func(m *transport.Msg) {
			var id string
			if kept {
				g, err := messages.DecodeAs[messages.GroupReady](m.Data)
				if err != nil {
					return
				}
				id = g.GroupID
			} else {
				g, err := messages.DecodeAs[messages.GroupFiltered](m.Data)
				if err != nil {
					return
				}
				id = g.GroupID
				l.verdict.Store(id, time.Now())
			}
			counter.Add(1)
			if at, ok := l.stored.LoadAndDelete(id); ok {
				l.filterLat.add(time.Since(at.(time.Time)))
			}
		}
	}
	ledger := func(m *transport.Msg) {
		pl, err := messages.DecodeAs[messages.PromptLedger](m.Data)
		if err != nil {
			return
		}
		switch pl.State {
		case messages.LedgerConsumed:
			l.admitted.Add(1)
			if pl.Attempt > 0 {
				l.reconsumed.Add(1)
			}
		case messages.LedgerRequeued:
			l.requeued.Add(1)
		case messages.LedgerFiltered:
			if at, ok := l.verdict.LoadAndDelete(pl.GroupID); ok {
				l.ctlLat.add(time.Since(at.(time.Time)))
			}
		}
	}
	for subj, h := range map[string]transport.Handler{s.kept: verdict(&l.kept, true), s.filtered: verdict(&l.filtered, false), s.ledger: ledger} {
		sub, err := l.bus.Subscribe(subj, h)
		if err != nil {
			return err
		}
		l.subs = append(l.subs, sub)
	}
	return nil
}

func (l *level) stats() rollout.Stats {
	var t rollout.Stats
	for _, a := range l.ros {
		t.Add(a.Stats())
	}
	return t
}

// settled: the source is spent, every admitted group was judged (or
// aborted) and no rollout actor holds a group.
func (l *level) settled() bool {
	if l.src.n.Load() < l.src.total {
		return false
	}
	st := l.stats()
	judged, reported := l.kept.Load()+l.filtered.Load(), st.GroupsReady+st.GroupsAborted
	if judged < st.GroupsReady || reported < l.src.total {
		return false
	}
	// Every group the controller admitted was reported by a rollout
	// actor, and no requeued prompt waits to be admitted again.
	if reported < l.admitted.Load() || l.requeued.Load() != l.reconsumed.Load() {
		return false
	}
	for _, a := range l.ros {
		if g, _ := a.InFlight(); len(g) > 0 {
			return false
		}
	}
	// The controller may still be stepping a verdict or a step that
	// requeues a group (an overloaded one, late): settled only once all of
	// this held still for settleQuiet.
	key := [5]int64{judged, reported, l.admitted.Load(), l.requeued.Load(), int64(l.tr.StepCount())}
	if key != l.settleKey || l.settleAt.IsZero() {
		l.settleKey, l.settleAt = key, time.Now()
		return false
	}
	return time.Since(l.settleAt) >= settleQuiet
}

// settleQuiet is how long settled's counters must hold still (a
// controller with a mailbox of 4 once requeued a group after the level
// looked settled: TestOverloadedControllerLosesNothing lost it).
const settleQuiet = 300 * time.Millisecond

// finish stops the pipeline and fills the counters.
func (l *level) finish(r *Result) {
	l.stopActors()
	st := l.stats()
	r.Started, r.Finished, r.Aborted = st.Started, st.Finished, st.Aborted
	r.GroupsKept, r.GroupsFiltered, r.GroupsAdmitted = l.kept.Load(), l.filtered.Load(), l.admitted.Load()
	r.Turns = l.turns.Load()
	r.Steps = int64(l.tr.StepCount())
	r.MailboxDrops = int64(l.metricSum("asyncrl_actor_mailbox_dropped_total"))
	r.MailboxWaits = int64(l.metricSum("asyncrl_actor_mailbox_waits_total"))
	r.MailboxWaitSeconds = l.metricSum("asyncrl_actor_mailbox_wait_seconds_total")
	r.SlowConsumerDrops = l.bus.SlowConsumerDrops()
	r.StoreRetries = st.StoreRetries
	r.Errors = st.Aborted + l.routerErrs.Load() + st.GroupsUnstored + r.MailboxDrops + r.SlowConsumerDrops
	r.Lost = st.Started - st.Finished - st.Aborted
	if c := l.ctl.Core(); c != nil {
		m := c.Staleness()
		r.Lost += m.Running * int64(l.o.NSamples)
		if acc := m.Accepted + m.Filtered + m.Aborted + m.StaleDropped + m.Released + m.Running; acc != m.Submitted {
			r.Failure = fmt.Sprintf("controller counters do not add up: submitted %d, accounted %d", m.Submitted, acc)
		}
		if m.Submitted != r.GroupsAdmitted {
			r.Failure = fmt.Sprintf("controller submitted %d groups, ledger saw %d admitted", m.Submitted, r.GroupsAdmitted)
		}
	}
	if r.GroupsKept+r.GroupsFiltered != st.GroupsReady {
		r.Failure = fmt.Sprintf("%d groups ready, %d judged", st.GroupsReady, r.GroupsKept+r.GroupsFiltered)
	}
}

// metricSum sums the counter name over its labels (the actor shells').
func (l *level) metricSum(name string) float64 {
	mfs, err := l.reg.Gather()
	if err != nil {
		return 0
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// stopActors stops the rollout actors, controller, sampling and trainer
// (idempotent).
func (l *level) stopActors() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if l.stopped {
		return
	}
	l.stopped = true
	for _, a := range l.ros {
		_ = a.Stop(ctx)
	}
	if l.ctl != nil {
		_ = l.ctl.Stop(ctx)
	}
	if l.smp != nil {
		_ = l.smp.Stop(ctx)
	}
	if l.tr != nil {
		_ = l.tr.Stop(ctx)
	}
}

// hold pauses every engine for the start barrier (Options.StartHold) and
// reports whether it did.
func (l *level) hold(ctx context.Context) (bool, error) {
	if l.o.StartHold <= 0 {
		return false, nil
	}
	l.held = true
	for _, d := range l.drivers {
		if err := d.Pause(ctx, driver.PauseWait, false); err != nil {
			return false, errors.Join(fmt.Errorf("scale: start barrier: %w", err), l.release(ctx))
		}
	}
	return true, nil
}

// release ends the start barrier: the held requests go to the engines.
func (l *level) release(ctx context.Context) error {
	if !l.held {
		return nil
	}
	l.held = false
	var errs []error
	for _, d := range l.drivers {
		if err := d.Resume(ctx); err != nil {
			errs = append(errs, fmt.Errorf("scale: releasing the start barrier: %w", err))
		}
	}
	return errors.Join(errs...)
}

func (l *level) stop() {
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	_ = l.release(rctx) // a level that failed while held; the engines close below anyway
	rcancel()
	l.stopActors()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range l.subs {
		_ = s.Unsubscribe()
	}
	if l.sys != nil {
		_ = l.sys.Shutdown(ctx)
	}
	if l.router != nil {
		_ = l.router.Shutdown(ctx)
	}
	for _, s := range l.srvs {
		_ = s.Shutdown(ctx)
	}
	for _, e := range l.engs {
		e.Close()
	}
	if l.bus != nil {
		_ = l.bus.Close()
	}
	if l.client != nil {
		l.client.CloseIdleConnections()
	}
}
