package node

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/asyncrl/asyncrl/actors"
	"github.com/asyncrl/asyncrl/actors/controller"
	"github.com/asyncrl/asyncrl/actors/rollout"
	"github.com/asyncrl/asyncrl/actors/router/proxy"
	"github.com/asyncrl/asyncrl/actors/sampling"
	"github.com/asyncrl/asyncrl/actors/trainer"
	"github.com/asyncrl/asyncrl/actors/trainer/microbatch"
	"github.com/asyncrl/asyncrl/actors/trainer/steprule"
	"github.com/asyncrl/asyncrl/cluster/internal/retry"
	"github.com/asyncrl/asyncrl/cluster/localengine"
	"github.com/asyncrl/asyncrl/cluster/weightsync"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/internal/inproc"
	"github.com/asyncrl/asyncrl/internal/report"
	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/tasks"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
	"github.com/asyncrl/asyncrl/wiring"
)

// Sentinel errors.
var (
	// ErrConfig wraps configuration problems found while starting.
	ErrConfig = errors.New("node: invalid configuration")
	// ErrStalled: dynamic sampling (filter or replace) sampled
	// filter.max_sample_batches generation batches for one trainer step
	// without filling it (the controller's SamplingExhausted; SkyRL raises
	// there). The groups it held were requeued.
	ErrStalled = errors.New("node: no trainable groups")
)

// Node runs a set of roles in one process; `asyncrl run` is one node with
// every role: the embedded NATS server, the built-in engines behind the
// router, the rollout actors, the sampling (dynamic-sampling) actor, the
// staleness controller, the trainer and the weight publisher (SkyRL deltas
// through a receiver per engine by default; see the package doc).
type Node struct {
	cfg  config.Config
	opts Options
	subj transport.RunPlan
	task tasks.Task

	bus     *natsbus.Bus
	engines []*localengine.Engine
	// driven are the engines the node updates over HTTP: its own, then
	// engines.external.
	driven     []*weightsync.Driven
	router     *proxy.Router
	routerDone chan struct{} // closed when the router's Serve returned
	// routerUnreg takes the router out of inproc.Default; routerUp is
	// the router's transport to the engines, rolloutUp the rollout
	// actors' to the router (both serve this process's peers in process).
	routerUnreg         func()
	routerUp, rolloutUp *inproc.Transport
	routerURL           string
	sys                 *actors.System
	ctl                 *controller.Actor
	smp                 *sampling.Actor
	rollouts            []*rollout.Actor
	tr                  *trainer.Actor
	pub                 *inProcPublisher
	wsync               *weightSync // publisher.mode delta (the default)
	remoteRetry         remoteRetry // spaces a remote version's retries
	hooks               testHooks
	httpc               *http.Client
	// weightsSub loads versions published by a remote trainer.
	weightsSub  transport.Subscription
	groupStream transport.Stream
	// early is a cluster term's weight store being opened since startBus
	// (earlystore.go), until weightSyncMode takes it.
	early      *pendingStore
	reg        *prometheus.Registry
	metricsSrv *http.Server
	metricsURL string
	ledger     *Ledger
	steplog    *stepLog // every step's report row (the summary's)
	progress   *progress
	// remote: engines on other nodes (Options.Remote).
	remote     *EngineSet
	remoteStop context.CancelFunc
	remoteWG   sync.WaitGroup

	start    time.Time
	stopOnce sync.Once
	// hf is the run's Hugging Face checkpoint directory (model section),
	// "" for the built-in policy.
	hf string
	// tok is the directory of the model's tokenizer: the checkpoint's,
	// or, for an init_checkpoint without one (asyncrl sft's serving
	// directories hold weights only), the model directory's copy of
	// model.tokenizer; "" for the built-in policy.
	tok string
	// exec is the exec backend's stepper (nil on other backends): its
	// worker group's per-rank figures go to /metrics and summary.json.
	exec *trainer.Exec
}

// testHooks let tests observe and slow parts of a run.
type testHooks struct {
	// beforeApply runs in engine i's receiver agent after it fetched
	// version and before it applies it (a deliberately slow applier).
	beforeApply func(engine int, version int64)
	// wrapEngine wraps engine i's HTTP handler.
	wrapEngine func(i int, e *engine.Engine, h http.Handler) http.Handler
	// corrupt changes a version's bytes on the data plane after their
	// checksums were computed (publisher.transport dataplane).
	corrupt func(version int64, b []byte)
}

// New checks the configuration and builds the task; Start starts everything.
func New(cfg config.Config, opts Options) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	s, err := transport.Plan(cfg.Run.ID)
	if err != nil {
		return nil, fmt.Errorf("%w: run.id: %w", ErrConfig, err)
	}
	task, err := BuildTask(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Publisher.Mode == config.PublishLoRA {
		return nil, fmt.Errorf("%w: publisher.mode: lora is not supported by asyncrl run (the built-in policy has no adapters); use delta or full", ErrConfig)
	}
	if opts.Remote != nil {
		if cfg.Publisher.Mode != config.PublishDelta || cfg.Publisher.Store != config.StoreNATS || cfg.Publisher.Transport == config.TransportDataPlane {
			return nil, fmt.Errorf("%w: engines on other nodes need publisher.mode delta, publisher.store nats and the store transport", ErrConfig)
		}
	} else if cfg.Engines.Count == 0 && len(cfg.Engines.External) == 0 && len(opts.Engines) == 0 {
		return nil, fmt.Errorf("%w: engines.count: 0 engines to update: set count ≥ 1 or list engines.external (engines.external_urls are only routed to)", ErrConfig)
	}
	if err := checkExternal(cfg, opts.Remote != nil); err != nil {
		return nil, err
	}
	if err := checkSwapped(cfg, opts); err != nil {
		return nil, err
	}
	return &Node{cfg: cfg, opts: opts, subj: s, task: task}, nil
}

// BuildTask resolves rollout.task and the optional rollout.dataset (a
// configuration problem is ErrConfig); the cluster agent's rollout role
// builds its rollout actors' task with it.
func BuildTask(cfg config.Config) (tasks.Task, error) {
	task, err := wiring.EnvTask(cfg.Rollout) // rollout.task, or rollout.env's servers
	if err != nil {
		return nil, fmt.Errorf("%w: rollout.task: %w", ErrConfig, err)
	}
	if cfg.Rollout.Dataset != "" {
		ds, err := tasks.LoadDataset(cfg.Rollout.Dataset)
		if err != nil {
			return nil, fmt.Errorf("%w: rollout.dataset: %w", ErrConfig, err)
		}
		if task, err = tasks.WithDataset(task, ds); err != nil {
			return nil, fmt.Errorf("%w: rollout.dataset: %w", ErrConfig, err)
		}
	}
	return task, nil
}

// RouterURL is the router's base URL.
func (n *Node) RouterURL() string { return n.routerURL }

// BusURL is the URL other processes (a remote trainer worker) dial to
// reach this node's bus.
func (n *Node) BusURL() string {
	if n.bus == nil {
		return ""
	}
	return n.bus.ClientURL()
}

// EngineURLs lists the built-in engines' base URLs.
func (n *Node) EngineURLs() []string {
	out := make([]string, len(n.engines))
	for i, e := range n.engines {
		out[i] = e.URL
	}
	return out
}

// StopEngine shuts built-in engine i down (its listener and loop), as if
// its process died: in-flight requests are aborted, the router marks it
// down after failed requests and sends retries elsewhere.
func (n *Node) StopEngine(ctx context.Context, i int) error {
	if i < 0 || i >= len(n.engines) {
		return fmt.Errorf("node: no engine %d", i)
	}
	return n.engines[i].Stop(ctx)
}

// Bus returns the node's bus.
func (n *Node) Bus() transport.Bus { return n.bus }

// Ledger returns the node's in-memory ledger.
func (n *Node) Ledger() *Ledger { return n.ledger }

// Start starts the bus, engines, router and actors. On error everything
// started so far is stopped.
func (n *Node) Start(ctx context.Context) (err error) {
	n.start = time.Now()
	defer func() {
		if err != nil {
			n.Stop()
		}
	}()
	if err := n.resolveModel(); err != nil {
		return err
	}
	if err := n.startBus(ctx); err != nil {
		return err
	}
	n.phase("streams created")
	ptr, err := n.newTrainerPolicy()
	if err != nil {
		return err
	}
	baseDir, initial, err := n.initialWeights(ptr)
	if err != nil {
		return err
	}
	n.phase("trainer restored, version 0 saved")
	if err := n.startServing(ctx, initial); err != nil {
		return err
	}
	n.phase("router listening")
	tpub, err := n.startPublisher(ctx, baseDir, ptr)
	if err != nil {
		return err
	}
	n.phase("weights published as version 0, engines registered")
	if n.sys, err = actors.NewSystem(actors.SystemConfig{Logger: n.opts.Logger, RunID: n.cfg.Run.ID, Registerer: n.reg}); err != nil {
		return err
	}
	if err := n.startTrainer(ctx, ptr, tpub); err != nil {
		return err
	}
	fcfg := filterConfig(n.cfg)
	if err := n.startSampling(fcfg); err != nil {
		return err
	}
	if err := n.startRollouts(); err != nil {
		return err
	}
	n.countTokens()
	n.progress = newProgress(n)
	if err := n.startMetrics(); err != nil {
		return err
	}
	n.phase("actors started, waiting for an engine to serve version 0")
	return n.startController(ctx, fcfg)
}

// phase reports a phase of Start (Options.OnStartPhase).
func (n *Node) phase(p string) {
	if n.opts.OnStartPhase != nil {
		n.opts.OnStartPhase(p)
	}
}

// clusterCreateWithin bounds the creation of a cluster term's stream or
// bucket; clusterMetaWait bounds one ask for JetStream's meta leader and
// clusterAttemptWait one attempt at the creation. JetStream answers a
// create once the new stream's raft group elected its leader, and when
// the group's preferred leader is a server that was just killed (its
// peers saw no shutdown, so it still counts as online when copies are
// placed and is drawn as preferred one time in three with three
// servers) the live peers elect one only after their election timeout,
// 4–9 s (nats-server v2.15.2, server/raft.go minElectionTimeoutDefault
// and maxElectionTimeoutDefault; server/jetstream_cluster.go
// setPreferredMember, processStreamLeaderChange). That answer can be
// lost, and a create sent again while the election runs is not answered
// by it either, but one sent once the stream has its leader is answered
// at once (the same config: jsClusteredStreamRequest proposes the
// assignment again and the leader answers). So an attempt is short and
// the create is sent again every 2.5 s: it ends within 2.5 s of the
// election. At nats.go's default 5 s (v1.55.0 jetstream/jetstream.go
// defaultAPITimeout) a takeover spent 11 s making one
// bucket; at 12 s, with the answer lost twice, 25 s. A create sent with
// no meta leader is never answered at all: each try asks for the meta
// leader first (natsbus.Bus.JetStreamReady, 1 s).
const (
	clusterCreateWithin = 30 * time.Second
	clusterMetaWait     = time.Second
	clusterAttemptWait  = 2 * time.Second
)

// clusterRetry runs f once, or, in a cluster term, tries it until it
// succeeds within clusterCreateWithin: each try asks for JetStream's
// meta leader (which a clustered bus elects anew, 4–9 s, when the
// server that led it died) and then runs f with clusterAttemptWait.
func (n *Node) clusterRetry(ctx context.Context, f func(context.Context) error) error {
	if n.opts.Remote == nil {
		return f(ctx)
	}
	// The last try must not outlast the window either.
	ctx, cancel := context.WithTimeout(ctx, clusterCreateWithin)
	defer cancel()
	meta := func() error {
		mctx, mcancel := context.WithTimeout(ctx, clusterMetaWait)
		defer mcancel()
		err := n.bus.JetStreamReady(mctx)
		if errors.Is(err, transport.ErrClosed) {
			return retry.Permanent(err)
		}
		if err != nil {
			return fmt.Errorf("no JetStream meta leader yet: %w", err)
		}
		return nil
	}
	return retry.Do(ctx, clusterCreateWithin, retry.After(meta, func() error {
		actx, cancel := context.WithTimeout(ctx, clusterAttemptWait)
		defer cancel()
		return f(actx)
	}))
}

// streamReplicas is the replication of the run's own streams: a cluster
// term's (Options.Remote.Replicas), else 1.
func (n *Node) streamReplicas() int {
	if n.opts.Remote != nil {
		return max(1, n.opts.Remote.Replicas)
	}
	return 1
}

// trainerConfig maps the trainer section onto the built-in backend.
func trainerConfig(cfg config.Config) model.TrainerConfig { return wiring.PolicyTrainer(cfg) }

// publishRetry is how the trainer tries a failed publish again
// (publisher.attempts, publisher.retry_backoff).
func publishRetry(p config.PublisherConfig) steprule.Retry {
	return steprule.RetryOf(p.Attempts, p.RetryBackoff)
}

func microbatchConfig(t config.TrainerConfig) microbatch.Config {
	mb := microbatch.DefaultConfig()
	mb.MaxTokensPerMicrobatch = t.MaxTokensPerMicrobatch
	mb.DPSize = t.DPRanks()
	// a worker group's ranks train equal shares (config checks that B·n
	// divides by exec_ranks)
	mb.EqualSize = t.Backend == config.BackendExec && t.ExecWorld() > 1
	mb.Strategy = microbatch.Strategy(t.DPPartition)
	mb.Packing = microbatch.Packing(t.MicrobatchMode)
	return mb
}

// taskSource draws prompts from a task with a PCG seeded by the run seed.
type taskSource struct {
	task tasks.Task
	rng  *rand.Rand
	n    int64
}

func newTaskSource(t tasks.Task, seed int64) *taskSource {
	return &taskSource{task: t, rng: rand.New(rand.NewPCG(uint64(seed), 0x70726f6d))}
}

func (s *taskSource) Next() (controller.Prompt, bool) {
	p := s.task.Sample(s.rng)
	s.n++
	return controller.Prompt{ID: rollout.PromptID("p"+strconv.FormatInt(s.n, 10), p.Seed), Text: p.Text}, true
}

// Wait blocks until the trainer finished run.steps steps, ctx ends (an
// interrupt), training fails, or the filter starves the trainer.
//
// Once the trainer is done it waits (up to settleMarks) for the
// controller to mark the last step's groups trained, so the run does not
// stop between the trainer's StepDone and the controller's marks: the
// ledger and the summary then agree that run.steps·B groups were trained.
func (n *Node) Wait(ctx context.Context) (interrupted bool, err error) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var trainedAt time.Time
	for {
		select {
		case <-ctx.Done():
			return true, nil
		case <-tick.C:
		}
		n.progress.update()
		if n.stepCount() >= n.cfg.Run.Steps {
			if trainedAt.IsZero() {
				trainedAt = time.Now()
			}
			if n.ledger.marked() >= int64(n.cfg.Run.Steps) || time.Since(trainedAt) >= settleMarks {
				return false, nil
			}
			continue
		}
		if err := n.Err(); err != nil {
			return false, err
		}
		if ex, ok := n.ledger.samplingExhausted(); ok {
			return false, fmt.Errorf("%w: dynamic sampling (filter.mode %s) sampled %d generation batches of %d groups for step %d and kept only %d good groups (filter.max_sample_batches %d); the %d groups it held were requeued — check the task's difficulty",
				ErrStalled, ex.Mode, ex.SampleBatches, ex.MiniBatch, ex.Step, ex.Good, n.cfg.Filter.MaxSampleBatches, ex.Requeued)
		}
	}
}

// settleMarks bounds Wait's wait for the controller's trained marks of
// the last step (one bus hop and a core step: milliseconds, unless the
// controller is wedged — then the report says so).
const settleMarks = 5 * time.Second

// Stop stops the actors (rollouts first, so every running episode is
// reported aborted), then the router, engines and bus. It is idempotent.
func (n *Node) Stop() {
	n.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		log := n.opts.Logger
		log.Debug().Msg("node: stopping rollout actors")
		for _, r := range n.rollouts {
			if err := r.Stop(ctx); err != nil {
				log.Warn().Err(err).Msg("rollout stop")
			}
		}
		if n.bus != nil {
			_ = n.bus.Conn().FlushTimeout(2 * time.Second)
		}
		log.Debug().Msg("node: settling")
		n.settle(ctx)
		log.Debug().Msg("node: stopping actors")
		if n.smp != nil {
			_ = n.smp.Stop(ctx)
		}
		if n.ctl != nil {
			_ = n.ctl.Stop(ctx)
		}
		if n.tr != nil {
			_ = n.tr.Stop(ctx)
		}
		if n.weightsSub != nil {
			_ = n.weightsSub.Unsubscribe() // no new versions from a remote trainer
		}
		if n.remoteStop != nil {
			n.remoteStop()
			n.remoteWG.Wait()
			n.remote.close()
		}
		n.dropEarlyStore() // a start that failed before its weight sync took it
		if n.wsync != nil {
			// Let the receivers finish the versions already published, so
			// the report sees the engines' final versions.
			n.wsync.Drain(10 * time.Second)
			n.wsync.Close()
		}
		if n.sys != nil {
			_ = n.sys.Shutdown(ctx)
		}
		if n.ledger != nil {
			n.ledger.stop()
		}
		if n.steplog != nil {
			if err := n.steplog.close(); err != nil {
				log.Warn().Err(err).Msg("node: step log")
			}
		}
		log.Debug().Msg("node: stopping router and engines")
		if n.routerUnreg != nil {
			n.routerUnreg()
		}
		if n.routerDone != nil {
			_ = n.router.Shutdown(ctx) // refuses new requests, drains, then stops Serve
			<-n.routerDone
		}
		n.stopMetrics(ctx)
		localengine.StopAll(n.engines)
		if n.httpc != nil {
			n.httpc.CloseIdleConnections()
		}
		log.Debug().Msg("node: closing the bus")
		if n.bus != nil {
			_ = n.bus.Close()
		}
	})
}

// settle waits (briefly) until every group a rollout actor published has
// reached the controller's books as seen on the bus — kept for training,
// filtered, trained or requeued — so the accounting at stop does not count
// messages still on the wire as lost.
func (n *Node) settle(ctx context.Context) {
	if n.ledger == nil {
		return
	}
	deadline := time.Now().Add(10 * time.Second) // only a slow or broken pipeline waits this long
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if len(n.unsettled()) == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// unsettled lists the groups this node's rollout actors published (ready
// or aborted) whose fate the controller has not announced: not kept for
// training and not filtered, trained or requeued.
func (n *Node) unsettled() []string {
	if n.ledger == nil {
		return nil
	}
	return n.ledger.unsettledLocal()
}

// Run starts the node, waits for the run to finish (or ctx to end), stops
// it and writes the report to run.report_dir. The summary is returned
// even when the run failed; err says why.
func Run(ctx context.Context, cfg config.Config, opts Options) (report.Summary, error) {
	n, err := New(cfg, opts)
	if err != nil {
		return report.Summary{}, err
	}
	if err := n.Start(ctx); err != nil {
		return report.Summary{}, err
	}
	if opts.OnStart != nil {
		opts.OnStart(n)
	}
	interrupted, werr := n.Wait(ctx)
	n.Stop()
	n.progress.finish()
	s := n.Summary(interrupted, werr)
	if cfg.Run.ReportDir != "" {
		if err := report.Write(cfg.Run.ReportDir, s); err != nil {
			return s, errors.Join(werr, err)
		}
	}
	return s, werr
}
