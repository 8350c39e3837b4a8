package node

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors/publisher"
	"github.com/asyncrl/asyncrl/actors/publisher/shell"
	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/actors/router/proxy"
	"github.com/asyncrl/asyncrl/actors/trainer"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/internal/wiring"
	"github.com/asyncrl/asyncrl/messages"
	pol "github.com/asyncrl/asyncrl/policy"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/weights/delta"
	"github.com/asyncrl/asyncrl/weights/receiver"
	"github.com/asyncrl/asyncrl/weights/safetensors"
	"github.com/asyncrl/asyncrl/weights/store"
)

// weightSync is publisher.mode delta: the trainer's Publish writes the new
// serving checkpoint, encodes it as a SkyRL delta against the previous one
// into the run's store, and hands the version to the publisher shell; one
// engineAgent per engine brings its receiver's copy to the version before
// the engine pauses, then pauses, loads, resumes and acks over the bus.
type weightSync struct {
	log   zerolog.Logger
	shell *shell.Shell
	st    store.Store
	pub   *delta.Publisher // nil with publisher.transport dataplane
	dp    *dpPush          // publisher.transport dataplane, else nil

	baseDir   string // version 0, every receiver's BaseModelPath
	stage     string // serving checkpoints being diffed
	prevDir   string // the serving checkpoint of pub.Version()
	prevOwned bool   // prevDir is ours to delete (not the base, not a remote trainer's)

	agents map[string]*engineAgent
	list   []*engineAgent
	// remote receives the commands for engines on other nodes.
	remote *remoteSet
	// ctx ends at close: it bounds what is published outside the trainer
	// (a remote trainer's versions).
	ctx    context.Context
	cancel context.CancelFunc

	published, deltaBytes prometheus.Counter
	encodeSeconds         prometheus.Histogram
	// swapSeconds is the control path of one engine update over HTTP:
	// pause → load → resume (the ack follows at once).
	swapSeconds *prometheus.HistogramVec

	mu        sync.Mutex
	encodeDur time.Duration // total time spent writing and encoding versions

	// fulls are the full checkpoints published; pruned the version below
	// which the store was emptied; pruning is true while a prune runs.
	fulls   []int64
	pruned  int64
	pruning bool
	pruneWG sync.WaitGroup
	prunedN prometheus.Counter
}

var _ trainer.Publisher = (*weightSync)(nil)
var _ shell.Dispatcher = (*weightSync)(nil)

// weightsLayout names the run's directories under run.data_dir.
type weightsLayout struct {
	syncDir   string // local store root: <publisher.sync_dir or data_dir/weights>/<run.id>
	publisher string // base/ and staging/
	receivers string // one receiver root per engine
}

func layoutFor(cfg config.Config) weightsLayout {
	sync := cfg.Publisher.SyncDir
	if sync == "" {
		sync = filepath.Join(cfg.Run.DataDir, "weights")
	}
	return weightsLayout{
		syncDir:   filepath.Join(sync, cfg.Run.ID),
		publisher: filepath.Join(cfg.Run.DataDir, "publisher", cfg.Run.ID),
		receivers: filepath.Join(cfg.Run.DataDir, "receivers", cfg.Run.ID),
	}
}

// routerSink tells the router proxy what the publisher shell decides.
type routerSink struct{ r *proxy.Router }

func (s routerSink) SetVersion(url string, v int64) error {
	return s.r.Apply(policy.SetVersion{URL: url, Version: v})
}

func (s routerSink) SetMinVersion(v int64) error {
	return s.r.Apply(policy.SetMinVersion{Version: v})
}

// openWeightStore opens publisher.store for this run, emptied: a run
// starts from version 0 (its seed), so versions an earlier run with the
// same run.id left behind would not chain.
func openWeightStore(ctx context.Context, cfg config.Config, l weightsLayout, n *Node) (store.Store, error) {
	var st store.Store
	var err error
	switch cfg.Publisher.Store {
	case config.StoreLocal:
		if err := os.RemoveAll(l.syncDir); err != nil {
			return nil, fmt.Errorf("node: publisher.sync_dir: %w", err)
		}
		return store.NewLocal(l.syncDir)
	case config.StoreNATS:
		nc := store.DefaultNATSConfig("asyncrl-weights-" + cfg.Run.ID)
		if n.opts.InMemoryBus {
			nc.Storage = jetstream.MemoryStorage
		}
		if n.opts.Remote != nil {
			nc.Replicas = max(1, n.opts.Remote.Replicas)
		}
		// A term's bucket is created through JetStream's meta leader,
		// which a clustered bus elects anew when its server died.
		err = n.clusterRetry(ctx, func() (err error) {
			st, err = store.NewNATS(ctx, n.bus.Conn(), nc)
			return err
		})
		if err == nil && n.opts.Remote != nil {
			// A node of the cluster whose server led the bucket may die
			// mid-run: ride out the leader election instead of failing
			// the term.
			st, err = store.NewRetrying(st, store.RetryConfig{Attempts: 8, BaseDelay: 200 * time.Millisecond, MaxDelay: 5 * time.Second}, nil)
		}
	case config.StoreS3:
		sc := store.DefaultS3Config()
		sc.Bucket, sc.Prefix, sc.CreateBucket = cfg.Publisher.S3Bucket, cfg.Run.ID+"/", true
		sc.AccessKey, sc.SecretKey = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
		sc.Endpoint, sc.Secure = "s3.amazonaws.com", true
		if e := cfg.Publisher.S3Endpoint; e != "" {
			if u, perr := url.Parse(e); perr == nil && u.Host != "" {
				sc.Endpoint, sc.Secure = u.Host, u.Scheme == "https"
			} else {
				sc.Endpoint = strings.TrimSuffix(e, "/")
			}
		}
		st, err = store.NewS3(ctx, sc)
	default:
		return nil, fmt.Errorf("%w: publisher.store %q", ErrConfig, cfg.Publisher.Store)
	}
	if err != nil {
		return nil, fmt.Errorf("node: publisher.store %s: %w", cfg.Publisher.Store, err)
	}
	keys, err := st.List(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("node: publisher.store %s: %w", cfg.Publisher.Store, err)
	}
	for _, k := range keys {
		if err := st.Delete(ctx, k); err != nil {
			return nil, fmt.Errorf("node: publisher.store %s: %w", cfg.Publisher.Store, err)
		}
	}
	return st, nil
}

// saveBase writes version 0 (the engines' initial weights) and returns its
// directory.
func saveBase(cfg config.Config, serving *pol.Model) (string, error) {
	l := layoutFor(cfg)
	if err := os.RemoveAll(l.publisher); err != nil {
		return "", fmt.Errorf("node: publisher dir: %w", err)
	}
	base := filepath.Join(l.publisher, "base")
	if err := serving.SaveServing(base); err != nil {
		return "", fmt.Errorf("node: base checkpoint: %w", err)
	}
	return base, nil
}

// startWeightSync builds the delta publisher, the shell and one agent per
// engine, and registers the engines at version 0.
func (n *Node) startWeightSync(ctx context.Context, baseDir string) (*weightSync, error) {
	cfg := n.cfg
	l := layoutFor(cfg)
	stage := filepath.Join(l.publisher, "staging")
	if err := os.MkdirAll(stage, 0o755); err != nil {
		return nil, fmt.Errorf("node: publisher dir: %w", err)
	}
	if cfg.Publisher.Transport == config.TransportDataPlane {
		return n.startDataPlaneSync(baseDir, stage)
	}
	st, err := openWeightStore(ctx, cfg, l, n)
	if err != nil {
		return nil, err
	}
	pcfg := delta.DefaultPublisherConfig()
	pcfg.Encode.Level = cfg.Publisher.ZstdLevel
	pcfg.Encode.MaxFileSizeGB = cfg.Publisher.MaxFileSizeGB
	pcfg.Encode.SpoolDir = stage
	pcfg.FullEvery = int64(cfg.Publisher.FullCheckpointEvery)
	dp, err := delta.NewPublisher(ctx, st, pcfg)
	if err != nil {
		return nil, fmt.Errorf("node: publisher: %w", err)
	}
	if err := os.RemoveAll(l.receivers); err != nil {
		return nil, fmt.Errorf("node: receivers dir: %w", err)
	}
	w, err := n.newWeightSync(baseDir, stage)
	if err != nil {
		return nil, err
	}
	w.st, w.pub = st, dp
	if n.opts.Remote != nil {
		if err := uploadBase(ctx, st, baseDir); err != nil {
			w.close()
			return nil, err
		}
		n.wsync = w // startRemote registers the members' engines with it
		if err := n.startRemote(ctx, "asyncrl-weights-"+cfg.Run.ID); err != nil {
			w.close()
			return nil, err
		}
	}
	for i, d := range n.driven {
		if d.local == nil {
			// An engine started elsewhere serves weights of its own: the
			// run's version 0 goes in before it is registered.
			if err := loadBase(ctx, d, baseDir, string(cfg.Trainer.PauseMode)); err != nil {
				w.close()
				return nil, err
			}
		}
		rc := receiver.DefaultConfig(filepath.Join(l.receivers, d.name), baseDir)
		rc.Logger = w.log.With().Str("engine", d.name).Logger()
		rc.Registerer = prometheus.WrapRegistererWith(prometheus.Labels{"engine": d.name}, n.reg)
		rcv, err := receiver.New(rc, st)
		if err != nil {
			w.close()
			return nil, fmt.Errorf("node: receiver %s: %w", d.name, err)
		}
		if err := w.join(n, i, d, rcv); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// startDataPlaneSync is startWeightSync for publisher.transport dataplane:
// no store and no receivers; the agents pull each version from the
// publisher's TCP data plane into memory.
func (n *Node) startDataPlaneSync(baseDir, stage string) (*weightSync, error) {
	if n.cfg.Trainer.Backend == config.BackendRemote {
		// A remote trainer's versions would need their own offers and the
		// worker's version bookkeeping (worker.go reads the delta publisher).
		return nil, fmt.Errorf("%w: publisher.transport dataplane needs trainer.backend builtin", ErrConfig)
	}
	base, err := pol.LoadServing(baseDir)
	if err != nil {
		return nil, fmt.Errorf("node: base checkpoint: %w", err)
	}
	names := make([]string, len(n.engines))
	for i, le := range n.engines {
		names[i] = le.name
	}
	d, err := newDPPush(n.cfg.Run.ID, base.Config(), names)
	if err != nil {
		return nil, err
	}
	w, err := n.newWeightSync(baseDir, stage)
	if err != nil {
		d.close()
		return nil, err
	}
	w.dp = d
	for _, c := range []prometheus.Collector{d.bytes, d.refused} {
		if err := n.reg.Register(c); err != nil {
			w.close()
			return nil, fmt.Errorf("node: publisher metrics: %w", err)
		}
	}
	for i, d := range n.driven { // only the node's own: checkExternal refuses external engines here
		if err := w.join(n, i, d, nil); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// join starts engine i's agent (rcv nil: it pulls from the data plane) and
// registers the engine at version 0; on error w is closed.
func (w *weightSync) join(n *Node, i int, d *drivenEngine, rcv *receiver.Receiver) error {
	a := newEngineAgent(i, d, rcv, w.shell, n.bus, n.cfg, n.hooks.beforeApply, w.log)
	a.dp = w.dp
	a.swapped = w.swapSeconds.WithLabelValues(d.name)
	w.agents[d.name], w.list = a, append(w.list, a)
	if _, err := w.shell.Join(d.name, d.url, 0); err != nil {
		w.close()
		return err
	}
	return nil
}

// newWeightSync builds the parts both transports share: metrics and the
// publisher shell.
func (n *Node) newWeightSync(baseDir, stage string) (*weightSync, error) {
	cfg := n.cfg
	baseBytes, err := dirBytes(baseDir)
	if err != nil {
		return nil, err
	}
	wctx, wcancel := context.WithCancel(context.Background())
	w := &weightSync{log: n.opts.Logger.With().Str("actor", "publisher").Logger(), ctx: wctx, cancel: wcancel,
		baseDir: baseDir, stage: stage, prevDir: baseDir, agents: map[string]*engineAgent{},
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
	for _, c := range []prometheus.Collector{w.published, w.deltaBytes, w.encodeSeconds, w.swapSeconds, w.prunedN} {
		if err := n.reg.Register(c); err != nil {
			w.close()
			return nil, fmt.Errorf("node: publisher metrics: %w", err)
		}
	}
	// The publisher keeps routing engines within the run's staleness budget
	// (router.max_version_lag), so that the router's hard minimum leaves
	// a replica that is still loading a publish its sessions (issue 15).
	tc := wiring.PublisherTracker(cfg)
	tc.BaseBytes = baseBytes
	if w.shell, err = shell.New(shell.Config{Tracker: tc, RunID: cfg.Run.ID, Acks: n.subj.acks,
		MinVersion: n.subj.weights, Sender: "publisher-0", Logger: w.log},
		n.bus, routerSink{n.router}, w); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
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

// Dispatch implements shell.Dispatcher: the agent brings its engine to the
// plan's target (a receiver replays every delta up to it).
func (w *weightSync) Dispatch(cmd publisher.Command) {
	if a := w.agents[cmd.Engine]; a != nil {
		a.dispatch(cmd.Plan.Target)
	} else if w.remote != nil {
		w.remote.dispatch(cmd.Engine, cmd.Plan.Target)
	}
}

// Publish implements trainer.Publisher: the in-process trainer's version.
func (w *weightSync) Publish(ctx context.Context, m *pol.Model, version int64) error {
	if version != w.current()+1 {
		return fmt.Errorf("node: publisher: version %d after %d", version, w.current())
	}
	t0 := time.Now()
	dir := filepath.Join(w.stage, fmt.Sprintf("v%08d", version))
	if err := m.SaveServing(dir); err != nil {
		return err
	}
	return w.publishDir(ctx, dir, version, true, t0)
}

// publishDir publishes the serving checkpoint in dir as version; owned
// says whether dir may be deleted once the next version is encoded (a
// remote trainer's checkpoints are its own).
func (w *weightSync) publishDir(ctx context.Context, dir string, version int64, owned bool, t0 time.Time) error {
	if w.dp != nil {
		return w.publishDataPlane(ctx, dir, version, owned, t0)
	}
	out, err := w.encode(ctx, dir)
	if err != nil {
		return fmt.Errorf("node: publisher: version %d: %w", version, err)
	}
	if w.prevOwned {
		_ = os.RemoveAll(w.prevDir)
	}
	w.prevDir, w.prevOwned = dir, owned
	d := time.Since(t0)
	w.mu.Lock()
	w.encodeDur += d
	w.mu.Unlock()
	w.encodeSeconds.Observe(d.Seconds())
	w.published.Inc()
	w.deltaBytes.Add(float64(out.Manifest.TotalCompressedNumBytes))
	info := publisher.VersionInfo{Version: out.Version, DeltaBytes: out.Manifest.TotalCompressedNumBytes}
	if out.Full != nil {
		info.FullBytes = out.Full.TotalNumBytes
		defer w.prune(out.Version) // once the version is routable
	}
	if w.remote != nil {
		if err := w.remote.waitEngines(ctx); err != nil {
			return fmt.Errorf("node: publisher: version %d: %w", version, err)
		}
	}
	err = w.shell.Publish(ctx, info)
	if w.remote != nil && errors.Is(err, shell.ErrNoEngine) {
		// Every engine left while the version was on its way (their
		// node died or stopped): it is published; wait for an engine
		// (one that joins is brought to it) instead of failing the step.
		err = w.remote.waitServed(ctx, info.Version)
	}
	return err
}

// prune, after full checkpoint full was published, deletes from the store
// every version below the newest full checkpoint that every engine has
// already passed: nobody replays those deltas any more, and a receiver
// that resets starts from the full one (delta.Prune). Without it a
// multi-day run's store grows by one delta per step. It runs in the
// background, one at a time.
func (w *weightSync) prune(full int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fulls = append(w.fulls, full)
	if w.pruning {
		return
	}
	floor := int64(-1)
	for _, st := range w.shell.Engines() {
		if st.Serving >= 0 && (floor < 0 || st.Serving < floor) {
			floor = st.Serving
		}
	}
	before := int64(0)
	for _, f := range w.fulls {
		if f <= floor {
			before = max(before, f)
		}
	}
	if before <= w.pruned {
		return
	}
	w.pruning = true
	w.pruneWG.Go(func() {
		n, err := delta.Prune(w.ctx, w.st, before)
		w.mu.Lock()
		defer w.mu.Unlock()
		w.pruning = false
		w.prunedN.Add(float64(n))
		if err != nil {
			w.log.Warn().Err(err).Int64("before", before).Msg("publisher: pruning old versions failed; retried at the next full checkpoint")
			return
		}
		w.pruned = before
		w.fulls = slices.DeleteFunc(w.fulls, func(f int64) bool { return f < before })
	})
}

// current is the newest version published.
func (w *weightSync) current() int64 {
	if w.dp != nil {
		return w.dp.current()
	}
	return w.pub.Version()
}

// publishDataPlane offers dir's checkpoint on the data plane and announces
// the version to the shell, which dispatches it to the agents; the bytes
// are in memory from then on, so an owned dir is deleted at once.
func (w *weightSync) publishDataPlane(ctx context.Context, dir string, version int64, owned bool, t0 time.Time) error {
	size, err := w.dp.publishDir(ctx, dir, version)
	if owned {
		_ = os.RemoveAll(dir)
	}
	if err != nil {
		return fmt.Errorf("node: publisher: version %d: %w", version, err)
	}
	d := time.Since(t0)
	w.mu.Lock()
	w.encodeDur += d
	w.mu.Unlock()
	w.encodeSeconds.Observe(d.Seconds())
	w.published.Inc()
	return w.shell.Publish(ctx, publisher.VersionInfo{Version: version, FullBytes: size})
}

func (w *weightSync) encode(ctx context.Context, dir string) (delta.Published, error) {
	base, err := safetensors.OpenDir(w.prevDir)
	if err != nil {
		return delta.Published{}, err
	}
	defer base.Close()
	next, err := safetensors.OpenDir(dir)
	if err != nil {
		return delta.Published{}, err
	}
	defer next.Close()
	return w.pub.Publish(ctx, base, next, dir)
}

// drain waits (up to d) until every agent has loaded what it was told to
// or gave up, so the run's report sees the engines' final versions.
func (w *weightSync) drain(d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		idle := true
		for _, a := range w.list {
			idle = idle && a.idle()
		}
		if idle {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// close stops the agents and the shell's subscription.
func (w *weightSync) close() {
	w.cancel()
	w.pruneWG.Wait()
	for _, a := range w.list {
		a.stop()
	}
	if w.shell != nil {
		_ = w.shell.Close()
	}
	if w.dp != nil {
		w.dp.close()
	}
}

// syncTimeout bounds one engine's fetch, apply and load of a version.
const syncTimeout = 10 * time.Minute

// engineAgent drives one engine's receiver. Targets coalesce: while it
// works on version v, newer dispatches only raise the next target, and the
// receiver replays every delta up to it in one go.
type engineAgent struct {
	idx     int
	eng     *drivenEngine
	rcv     *receiver.Receiver // nil when dp is set
	dp      *dpPush            // publisher.transport dataplane
	sh      agentReporter
	bus     transport.Bus
	subject string
	runID   string
	// sender is the ack's Header.Sender: the engine's name in process,
	// the node's name on an engine host (discovery ties engines to
	// members by it).
	sender string
	mode   string
	log    zerolog.Logger
	// beforeApply is a test hook (a deliberately slow applier).
	beforeApply func(engine int, version int64)
	// swapped, when set, observes each successful pause → load → resume.
	swapped prometheus.Observer
	// onLoaded, when set, is called after the engine loaded and acked a
	// target (the engine host's catch-up events).
	onLoaded func(engine string, version int64)

	mu   sync.Mutex
	want int64 // newest target dispatched
	have int64 // newest target handled (loaded, or failed)
	// failed is the last target that failed, while have is still it: a
	// repeated dispatch of it (an engine host's LoadWeights is resent
	// until acked) tries it again.
	failed int64
	gone   bool // the engine was stopped

	wake   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// agentReporter is who an engineAgent tells about its progress: the
// publisher shell in process; an engine host (another node) only logs.
type agentReporter interface {
	Fetching(name string, version int64) error
	Failed(name string, version int64, err error)
	Leave(name string)
}

func newEngineAgent(i int, eng *drivenEngine, rcv *receiver.Receiver, sh agentReporter, bus transport.Bus, cfg config.Config,
	hook func(int, int64), log zerolog.Logger) *engineAgent {
	ctx, cancel := context.WithCancel(context.Background())
	a := &engineAgent{idx: i, eng: eng, rcv: rcv, sh: sh, bus: bus, runID: cfg.Run.ID, sender: eng.name, mode: string(cfg.Trainer.PauseMode),
		subject:     transport.MustSubject(cfg.Run.ID, transport.TopicEngines, eng.name, string(transport.EngineAck)),
		log:         log.With().Str("engine", eng.name).Logger(),
		beforeApply: hook, failed: publisher.NoVersion - 1, wake: make(chan struct{}, 1), ctx: ctx, cancel: cancel, done: make(chan struct{})}
	go a.loop()
	return a
}

func (a *engineAgent) dispatch(target int64) {
	a.mu.Lock()
	if target == a.failed && a.have == target {
		a.have, a.failed = target-1, publisher.NoVersion-1
	}
	a.want = max(a.want, target)
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

func (a *engineAgent) idle() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.gone || a.want <= a.have
}

func (a *engineAgent) stop() {
	a.cancel()
	<-a.done
}

func (a *engineAgent) loop() {
	defer close(a.done)
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-a.wake:
		}
		for a.ctx.Err() == nil {
			a.mu.Lock()
			t := a.want
			if a.gone || t <= a.have {
				a.mu.Unlock()
				break
			}
			a.mu.Unlock()
			err := a.sync(t)
			a.mu.Lock()
			a.have = t // a failure is retried by the next dispatch (of t again, or newer)
			a.failed = publisher.NoVersion - 1
			if err != nil {
				a.failed = t
			}
			a.gone = a.gone || errors.Is(err, engine.ErrClosed)
			a.mu.Unlock()
			switch {
			case err == nil:
				if a.onLoaded != nil {
					a.onLoaded(a.eng.name, t)
				}
			case errors.Is(err, engine.ErrClosed):
				a.sh.Leave(a.eng.name) // stopped: out of rotation for good
			case a.ctx.Err() == nil:
				a.sh.Failed(a.eng.name, t, err)
			}
		}
	}
}

// sync brings the engine to target: fetch and apply to the receiver's
// copy while the engine still serves, then pause, load, resume, ack — all
// through the engine's driver over HTTP. An engine on weight_load delta
// gets the deltas since the version it reports instead of the whole
// checkpoint; one that cannot take them (a gap, a refused delta) loads the
// receiver's full copy in the same pause.
func (a *engineAgent) sync(target int64) error {
	// A deadline, because the NATS object store bounds a Get without one
	// by the client's default timeout (seconds), too short for a full
	// checkpoint of a real model.
	ctx, cancel := context.WithTimeout(a.ctx, syncTimeout)
	defer cancel()
	_ = a.sh.Fetching(a.eng.name, target)
	if a.dp != nil {
		return a.syncDataPlane(ctx, target)
	}
	if err := a.rcv.Fetch(ctx, target); err != nil {
		return err
	}
	if a.beforeApply != nil {
		a.beforeApply(a.idx, target)
	}
	if _, err := a.rcv.Apply(ctx, target); err != nil {
		return err
	}
	var v int64
	t0 := time.Now()
	err := a.eng.swap(ctx, a.mode, func() (err error) {
		if a.eng.load == config.LoadDelta {
			if v, err = a.applyDeltas(ctx, target); err == nil {
				return nil
			}
			a.log.Warn().Err(err).Int64("version", target).Msg("weight sync: deltas not applied in place; loading the full checkpoint")
		}
		v, err = a.rcv.Load(receiver.LoaderFunc(func(dir string, version int64) error {
			return a.eng.drv.LoadCheckpoint(ctx, dir, version)
		}))
		return err
	})
	if err != nil {
		return err
	}
	if a.swapped != nil {
		a.swapped.Observe(time.Since(t0).Seconds())
	}
	_ = a.rcv.Prune(v - 1) // older deltas are needed again only after a reset, which refetches
	return a.ack(ctx, v)
}

// applyDeltas sends the engine every delta after the version it serves up
// to the receiver's (the engine checks each against its own copy and
// refuses a bad one, changing nothing).
func (a *engineAgent) applyDeltas(ctx context.Context, target int64) (int64, error) {
	served, err := a.eng.drv.ServedVersion(ctx)
	if err != nil {
		return 0, err
	}
	if served > target {
		return 0, fmt.Errorf("engine serves version %d, newer than the target %d", served, target)
	}
	for v := served + 1; v <= target; v++ {
		dir := a.rcv.DeltaDir(v)
		if _, err := os.Stat(dir); err != nil {
			return 0, fmt.Errorf("delta %d is not cached (engine at %d): %w", v, served, err)
		}
		if err := a.eng.drv.ApplyDelta(ctx, dir, v); err != nil {
			return 0, err
		}
	}
	return target, nil
}

// syncDataPlane pulls target's bytes from the publisher's data plane into
// memory (every range checksum-verified; a mismatch fails the version, which
// is then not served), builds the model while the engine still serves, then
// pauses, swaps it in, resumes and acks. The swap is in process: the data
// plane serves only engines the node started.
func (a *engineAgent) syncDataPlane(ctx context.Context, target int64) error {
	m, err := a.dp.fetch(ctx, target)
	if err != nil {
		return err
	}
	if a.beforeApply != nil {
		a.beforeApply(a.idx, target)
	}
	le := a.eng.local
	if err := le.e.Pause(ctx, a.mode, false); err != nil {
		// A "wait" pause cut short (ctx ended) leaves the engine paused:
		// let it serve its current weights rather than nothing.
		le.e.Resume()
		return err
	}
	err = le.e.SetModel(m, target)
	le.e.Resume()
	if err != nil {
		return err
	}
	return a.ack(ctx, target)
}

func (a *engineAgent) ack(ctx context.Context, v int64) error {
	data, err := messages.Encode(messages.EngineVersionAck{
		Header: messages.Header{RunID: a.runID, Sender: a.sender, Version: v}, Engine: a.eng.name, URL: a.eng.url})
	if err != nil {
		return err
	}
	return a.bus.Publish(ctx, a.subject, data)
}
