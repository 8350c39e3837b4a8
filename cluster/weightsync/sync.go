// Package weightsync brings a run's engines to the trainer's versions
// (publisher.mode delta): the trainer's Publish writes each version's
// serving checkpoint and hands it to a Mode — through the run's store as
// a SkyRL delta (Store) or over the TCP data plane (DataPlane) — and to
// the publisher shell, whose commands reach one Agent per engine; the
// agent brings its engine to the target (pause, load, resume over the
// engine's HTTP API) and acks it on the bus. Engines of other nodes get
// their commands through a Remote.
package weightsync

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors/publisher"
	"github.com/asyncrl/asyncrl/actors/publisher/tracker"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/weights/quant"
)

// Mode is how versions travel from the publisher to the engines: Store
// or DataPlane.
type Mode interface {
	// current is the newest version published.
	current() int64
	// publishVersion publishes the serving checkpoint in dir as version
	// through w's shell; owned says whether dir may be deleted.
	publishVersion(ctx context.Context, w *Sync, dir string, version int64, owned bool, t0 time.Time) error
	// source is engine e's Source.
	source(w *Sync, e *Driven) (Source, error)
	// collectors are the mode's own metrics.
	collectors() []prometheus.Collector
	close()
}

// Remote receives the commands for engines that are not this process's
// agents (engines on other nodes).
type Remote interface {
	// Dispatch sends engine its target; false when engine is not one of
	// the remote's.
	Dispatch(engine string, target int64) bool
	// WaitEngines blocks while the publisher has no engine registered.
	WaitEngines(ctx context.Context) error
	// WaitServed blocks until some engine serves version (after every
	// engine left while it was being published).
	WaitServed(ctx context.Context, version int64) error
}

// Config configures a Sync.
type Config struct {
	RunID     string
	PauseMode string
	Logger    zerolog.Logger
	// Registerer receives the publisher's and the mode's metrics.
	Registerer prometheus.Registerer
	Bus        transport.Bus
	// Router is told what the publisher shell decides.
	Router publisher.Router
	// Tracker is the publisher core's config (BaseBytes is set from
	// BaseDir).
	Tracker tracker.Config
	// Acks is the pattern of every EngineVersionAck; MinVersion the
	// subject the shell announces the minimum version on.
	Acks, MinVersion string
	// BaseDir is version 0 (every receiver's BaseModelPath); Stage the
	// directory the serving checkpoints are written to.
	BaseDir, Stage string
	// BeforeApply is a test hook: it runs in engine i's agent before it
	// applies a version.
	BeforeApply func(engine int, version int64)
	// BeforeAnnounce is a test hook: it runs once a version's weights are
	// written (in the store, or offered on the data plane) and before the
	// publisher shell tells the engines and the router about it.
	BeforeAnnounce func(version int64)
	// Remote, when set, returns the remote engines (nil while there are
	// none); it is read at each use.
	Remote func() Remote
	// Quantize, when set (publisher.quantize, SchemeFor), quantises every
	// version the engines load from the trainer's weights; BaseDir must
	// then be quantised too (SaveBase), so deltas chain over quantised
	// bytes.
	Quantize quant.Scheme
}

// Sync is the publisher side of weight sync: publisher.Publisher (the
// in-process trainer's versions), publisher.Dispatcher (the shell's commands
// to the agents) and the agents.
type Sync struct {
	c     Config
	log   zerolog.Logger
	shell *publisher.Shell
	mode  Mode

	agents map[string]*Agent
	list   []*Agent
	// ctx ends at Close: it bounds what is published outside the trainer
	// (a remote trainer's versions).
	ctx    context.Context
	cancel context.CancelFunc

	published, deltaBytes prometheus.Counter
	encodeSeconds         prometheus.Histogram
	// swapSeconds is the control path of one engine update over HTTP:
	// pause → load → resume (the ack follows at once).
	swapSeconds *prometheus.HistogramVec
	prunedN     prometheus.Counter
	quant       *quantMetrics // nil without Config.Quantize

	mu        sync.Mutex
	encodeDur time.Duration // total time spent writing and encoding versions
	// written is the newest version handed to the shell (its sizes, for
	// a Retry: the tracker's plans cost a catch-up by them).
	written tracker.VersionInfo
}

var _ publisher.Publisher = (*Sync)(nil)
var _ publisher.Dispatcher = (*Sync)(nil)

// New builds the metrics and the publisher shell over mode; Join adds
// the engines. On error mode is closed.
func New(c Config, mode Mode) (*Sync, error) {
	baseBytes, err := dirBytes(c.BaseDir)
	if err != nil {
		mode.close()
		return nil, err
	}
	wctx, wcancel := context.WithCancel(context.Background())
	w := &Sync{c: c, log: c.Logger.With().Str("actor", "publisher").Logger(), ctx: wctx, cancel: wcancel, mode: mode,
		agents: map[string]*Agent{},
		published: prometheus.NewCounter(prometheus.CounterOpts{Name: "asyncrl_publisher_versions_published_total",
			Help: "Weight versions the publisher encoded and announced."}),
		deltaBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "asyncrl_publisher_delta_bytes_total",
			Help: "Compressed bytes of the delta versions published."}),
		encodeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "asyncrl_publisher_encode_seconds",
			Help: "Time to write a version's serving checkpoint and encode its delta.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		swapSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "asyncrl_engine_weight_swap_seconds",
			Help:    "One engine's weight update over its HTTP API: pause, load (delta or full checkpoint), resume.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18)}, []string{"engine"}),
		prunedN: prometheus.NewCounter(prometheus.CounterOpts{Name: "asyncrl_publisher_pruned_objects_total",
			Help: "Store objects of versions every engine had passed, deleted below the newest such full checkpoint."}),
	}
	cs := append([]prometheus.Collector{w.published, w.deltaBytes, w.encodeSeconds, w.swapSeconds, w.prunedN}, mode.collectors()...)
	if c.Quantize != nil {
		w.quant = newQuantMetrics()
		cs = append(cs, w.quant.collectors()...)
	}
	for _, col := range cs {
		if err := c.Registerer.Register(col); err != nil {
			w.Close()
			return nil, fmt.Errorf("node: publisher metrics: %w", err)
		}
	}
	tc := c.Tracker
	tc.BaseBytes = baseBytes
	if w.shell, err = publisher.New(publisher.Config{Tracker: tc, RunID: c.RunID, Acks: c.Acks,
		MinVersion: c.MinVersion, Sender: "publisher-0", Logger: w.log}, c.Bus, c.Router, w); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// Shell is the publisher shell (engines join and leave through it).
func (w *Sync) Shell() *publisher.Shell { return w.shell }

// Context ends at Close.
func (w *Sync) Context() context.Context { return w.ctx }

// EncodeTime is the total time spent writing and encoding versions.
func (w *Sync) EncodeTime() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.encodeDur
}

// Current is the newest version published.
func (w *Sync) Current() int64 { return w.mode.current() }

// Join starts engine i's agent and registers the engine at version 0;
// on error w is closed.
func (w *Sync) Join(i int, d *Driven) error {
	src, err := w.mode.source(w, d)
	if err != nil {
		w.Close()
		return err
	}
	a := StartAgent(AgentConfig{Index: i, Engine: d, Source: src, Reporter: w.shell, Bus: w.c.Bus, RunID: w.c.RunID,
		PauseMode: w.c.PauseMode, Logger: w.log, BeforeApply: w.c.BeforeApply, Swapped: w.swapSeconds.WithLabelValues(d.Name)})
	w.agents[d.Name], w.list = a, append(w.list, a)
	if _, err := w.shell.Join(d.Name, d.URL, 0); err != nil {
		w.Close()
		return err
	}
	return nil
}

// remote is the current Remote, nil without one.
func (w *Sync) remote() Remote {
	if w.c.Remote == nil {
		return nil
	}
	return w.c.Remote()
}

// Dispatch implements publisher.Dispatcher: the agent brings its engine to the
// plan's target (a receiver replays every delta up to it).
func (w *Sync) Dispatch(cmd tracker.Command) {
	if a := w.agents[cmd.Engine]; a != nil {
		a.Dispatch(cmd.Plan.Target)
	} else if r := w.remote(); r != nil {
		r.Dispatch(cmd.Engine, cmd.Plan.Target)
	}
}

// Publish implements publisher.Publisher: the trainer's version — the
// built-in policy in memory, written to the stage directory first, or a
// serving directory (an exec child's, any architecture) published where it
// is (PublishDir). The newest version again is the retry of a publish
// that failed once its weights were written (Retry).
func (w *Sync) Publish(ctx context.Context, tw publisher.Weights, version int64) error {
	if version == w.Current() && version > 0 {
		return w.Retry(ctx, version)
	}
	if version != w.Current()+1 {
		return fmt.Errorf("node: publisher: version %d after %d", version, w.Current())
	}
	t0 := time.Now()
	if tw.Dir != "" {
		return w.PublishDir(ctx, tw.Dir, version, t0)
	}
	dir := filepath.Join(w.c.Stage, fmt.Sprintf("v%08d", version))
	if err := w.save(tw.Model, dir, version); err != nil {
		return err
	}
	return w.mode.publishVersion(ctx, w, dir, version, true, t0)
}

// PublishDir publishes the serving checkpoint in dir as version (a remote
// trainer's: it is not deleted); t0 is when the version arrived. With
// Config.Quantize the BF16 checkpoint is quantised into the stage
// directory first, and that copy is published.
func (w *Sync) PublishDir(ctx context.Context, dir string, version int64, t0 time.Time) error {
	if w.c.Quantize != nil {
		qdir, err := w.requantize(dir, version)
		if err != nil {
			return err
		}
		return w.mode.publishVersion(ctx, w, qdir, version, true, t0)
	}
	return w.mode.publishVersion(ctx, w, dir, version, false, t0)
}

// Retry publishes version, the newest version written (Current), again
// after its publish failed: its weights are in the store or on the data
// plane already, so nothing is written; the publisher shell dispatches it
// again to the engines that failed it and waits, as the first publish
// did. A version some engine serves meanwhile succeeds at once.
func (w *Sync) Retry(ctx context.Context, version int64) error {
	if version != w.Current() {
		return fmt.Errorf("node: publisher: retry of version %d, but the newest version written is %d", version, w.Current())
	}
	w.mu.Lock()
	info := w.written
	w.mu.Unlock()
	if info.Version != version {
		// Written but never handed to the shell (its publish ended
		// before): the sizes are unknown, which only costs plans.
		info = tracker.VersionInfo{Version: version}
	}
	return w.publishInfo(ctx, info)
}

// observePublish records a published version that took d to write and
// encode.
func (w *Sync) observePublish(d time.Duration) {
	w.mu.Lock()
	w.encodeDur += d
	w.mu.Unlock()
	w.encodeSeconds.Observe(d.Seconds())
	w.published.Inc()
}

// announce hands version info to the shell, first waiting for an engine
// when every remote engine is gone.
func (w *Sync) announce(ctx context.Context, info tracker.VersionInfo) error {
	if w.c.BeforeAnnounce != nil {
		w.c.BeforeAnnounce(info.Version)
	}
	return w.publishInfo(ctx, info)
}

// publishInfo hands version info to the shell (announce, or a Retry),
// first waiting for an engine when every remote engine is gone.
func (w *Sync) publishInfo(ctx context.Context, info tracker.VersionInfo) error {
	w.mu.Lock()
	w.written = info
	w.mu.Unlock()
	r := w.remote()
	if r != nil {
		if err := r.WaitEngines(ctx); err != nil {
			return fmt.Errorf("node: publisher: version %d: %w", info.Version, err)
		}
	}
	err := w.shell.Publish(ctx, info)
	if r != nil && errors.Is(err, publisher.ErrNoEngine) {
		// Every engine left while the version was on its way (their
		// node died or stopped): it is published; wait for an engine
		// (one that joins is brought to it) instead of failing the step.
		err = r.WaitServed(ctx, info.Version)
	}
	return err
}

// Drain waits (up to d) until every agent has loaded what it was told to
// or gave up, so the run's report sees the engines' final versions.
func (w *Sync) Drain(d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		idle := true
		for _, a := range w.list {
			idle = idle && a.Idle()
		}
		if idle {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Close stops the agents, the shell's subscription and the mode.
func (w *Sync) Close() {
	w.cancel()
	for _, a := range w.list {
		a.Stop()
	}
	if w.shell != nil {
		_ = w.shell.Close()
	}
	w.mode.close()
}

func dirBytes(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			total += fi.Size()
		}
		return err
	})
	return total, err
}
