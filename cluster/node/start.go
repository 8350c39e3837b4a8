package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors"
	"github.com/asyncrl/asyncrl/actors/controller"
	"github.com/asyncrl/asyncrl/actors/filter"
	"github.com/asyncrl/asyncrl/actors/publisher"
	"github.com/asyncrl/asyncrl/actors/rollout"
	"github.com/asyncrl/asyncrl/actors/router/proxy"
	"github.com/asyncrl/asyncrl/actors/sampling"
	"github.com/asyncrl/asyncrl/actors/staleness"
	"github.com/asyncrl/asyncrl/actors/trainer"
	"github.com/asyncrl/asyncrl/cluster/localengine"
	"github.com/asyncrl/asyncrl/cluster/rollouthost"
	"github.com/asyncrl/asyncrl/cluster/weightsync"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/internal/inproc"
	"github.com/asyncrl/asyncrl/internal/netx"
	pmodel "github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
	"github.com/asyncrl/asyncrl/wiring"
)

// startBus connects the bus (embedded or cfg.Bus.NATSURL), creates the
// run's durable ledger stream and trajectory buffer, and starts the
// in-memory ledger.
func (n *Node) startBus(ctx context.Context) (err error) {
	cfg := n.cfg
	bopts := natsbus.DefaultOptions()
	bopts.URL = cfg.Bus.NATSURL
	bopts.MaxPayload = cfg.Bus.MaxPayloadBytes
	bopts.Name = "asyncrl-" + cfg.Run.ID
	bopts.Logger = n.opts.Logger.With().Str("component", "bus").Logger()
	if n.opts.BusSecurity != nil {
		n.opts.BusSecurity.Apply(&bopts)
	} else {
		sec, err := wiring.BusSecurityFrom(cfg.Bus)
		if err != nil {
			return fmt.Errorf("node: %w", err)
		}
		sec.Apply(&bopts)
	}
	if !n.opts.InMemoryBus && cfg.Bus.NATSURL == "" {
		bopts.StoreDir = cfg.Bus.JetStreamDir
		if bopts.StoreDir == "" {
			bopts.StoreDir = filepath.Join(cfg.Run.DataDir, "jetstream")
		}
		if err := os.MkdirAll(bopts.StoreDir, 0o755); err != nil {
			return fmt.Errorf("node: jetstream dir: %w", err)
		}
	}
	if n.bus, err = natsbus.Connect(ctx, bopts); err != nil {
		return fmt.Errorf("node: bus: %w", err)
	}
	n.phase("bus connected")
	// A cluster term makes its weight bucket while it makes its streams
	// (earlyWeightStore): each may wait out a leader election
	// (clusterRetry), and one after the other the waits added up.
	n.earlyWeightStore(ctx)
	// The prompt ledger is durable: every PromptLedger, GroupAccepted and
	// GroupRequeued lands in JetStream as well as on the live subjects.
	// A cluster term replicates it (and the trajectory buffer) like the
	// rest of the run's state, so losing the server that led it loses
	// nothing and stalls nothing beyond a leader election. A term started
	// while a server is down takes the copies the servers up can hold
	// (MinReplicas): it would otherwise fail to start until the server came
	// back. It is an append-only log written every step for days: small
	// blocks halve the write cache the server holds for it (issue 37).
	ledgerErr := make(chan error, 1)
	go func() {
		ledgerErr <- n.clusterRetry(ctx, func(ctx context.Context) error {
			_, err := n.bus.Stream(ctx, transport.StreamConfig{Name: n.subj.LedgerStream, Replicas: n.streamReplicas(), MinReplicas: 1,
				Subjects: []string{n.subj.Ledger, n.subj.LedgerAll}, MaxAge: 7 * 24 * time.Hour, Memory: n.opts.InMemoryBus, SmallBlocks: true})
			return err
		})
	}()
	// The trajectory buffer, made meanwhile: finished groups wait in
	// JetStream until the sampling actor has judged them. In memory: it
	// only has to outlive a restart of the actors, not of the embedded
	// server.
	gerr := n.clusterRetry(ctx, func(ctx context.Context) (err error) {
		gs := rollouthost.GroupStream(n.subj, n.streamReplicas())
		gs.Duplicates = n.opts.GroupDuplicates
		n.groupStream, err = n.bus.Stream(ctx, gs)
		return err
	})
	var errs []error
	if err := <-ledgerErr; err != nil {
		errs = append(errs, fmt.Errorf("node: ledger stream: %w", err))
	}
	if gerr != nil {
		errs = append(errs, fmt.Errorf("node: trajectory buffer stream: %w", gerr))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	n.ledger = newLedger()
	n.ledger.keepAll = n.opts.KeepGroupRecords
	if n.steplog, err = openStepLog(cfg.Run.ReportDir, n.start); err != nil {
		return err
	}
	n.ledger.onStep = n.steplog.add
	if err := n.ledger.subscribe(n.bus, n.subj); err != nil {
		return fmt.Errorf("node: ledger: %w", err)
	}
	return nil
}

// newTrainerPolicy is the trainer's policy: the trainer owns the FP32
// master; engines serve BF16 copies. Resumed from Options.TrainerCheckpoint
// (weights, Adam moments, step and RNG from the checkpoint,
// hyperparameters from this run's config), else the run seed's.
func (n *Node) newTrainerPolicy() (*pmodel.Trainer, error) {
	if n.hf != "" || n.opts.Stepper != nil {
		return nil, nil // the trainer child holds a Hugging Face model; Options.Stepper its own
	}
	tcfg := trainerConfig(n.cfg)
	if n.opts.ExecCheckpoint != "" {
		return execCheckpointPolicy(n.opts.ExecCheckpoint, tcfg)
	}
	if n.opts.TrainerCheckpoint != "" {
		ptr, err := loadTrainerWithConfig(n.opts.TrainerCheckpoint, tcfg)
		if err != nil {
			return nil, fmt.Errorf("node: trainer checkpoint %s: %w", n.opts.TrainerCheckpoint, err)
		}
		return ptr, nil
	}
	model, err := pmodel.New(wiring.PolicyModel(n.cfg), uint64(n.cfg.Run.Seed))
	if err != nil {
		return nil, err
	}
	ptr, err := pmodel.NewTrainer(model, tcfg)
	if err != nil {
		return nil, fmt.Errorf("%w: trainer: %w", ErrConfig, err)
	}
	return ptr, nil
}

// initialWeights is version 0: with delta sync, the base checkpoint every
// receiver replays from (baseDir); otherwise the trainer's serving copy.
func (n *Node) initialWeights(ptr *pmodel.Trainer) (baseDir string, initial engine.Model, err error) {
	if n.hf != "" {
		return n.hfInitialWeights()
	}
	if n.opts.Stepper != nil {
		return n.swappedInitialWeights()
	}
	if n.cfg.Publisher.Mode == config.PublishDelta {
		if baseDir, err = weightsync.SaveBase(n.cfg, ptr.ServingCopy()); err != nil {
			return "", nil, err
		}
	}
	if baseDir == "" && (n.opts.TrainerCheckpoint != "" || n.opts.ExecCheckpoint != "") {
		return "", ptr.ServingCopy(), nil // InitialPolicy("") would be the seed's weights
	}
	if initial, err = wiring.InitialPolicyFor(baseDir, wiring.PolicyModel(n.cfg), uint64(n.cfg.Run.Seed)); err != nil {
		return "", nil, fmt.Errorf("node: initial weights: %w", err)
	}
	return baseDir, initial, nil
}

// startServing starts the built-in engines (none with Options.Remote),
// drives them and engines.external, and starts the router in front of
// them (and engines.external_urls).
func (n *Node) startServing(ctx context.Context, initial engine.Model) (err error) {
	cfg := n.cfg
	quiet := n.opts.Logger.Level(max(n.opts.Logger.GetLevel(), zerolog.WarnLevel))
	if len(n.opts.Engines) > 0 {
		if n.engines, err = localengine.Serve(cfg.Engines.ListenHost, n.opts.Engines, n.hooks.wrapEngine); err != nil {
			return err
		}
	} else if n.opts.Remote == nil {
		// a Hugging Face model's engines serve text with its tokenizer
		extra, err := wiring.EngineTokenizer(n.tok, initial)
		if err != nil {
			return fmt.Errorf("%w: model.path: %w", ErrConfig, err)
		}
		if n.engines, err = localengine.Start(cfg.Engines, initial, cfg.Run.Seed, quiet, n.hooks.wrapEngine, extra...); err != nil {
			return err
		}
	}
	if err := n.driveEngines(ctx); err != nil {
		return err
	}
	replicas := append(n.EngineURLs(), cfg.Engines.ExternalURLs...)
	for _, d := range n.driven[len(n.engines):] {
		replicas = append(replicas, d.URL)
	}
	n.reg = prometheus.NewRegistry()
	rcfg := routerConfig(cfg, replicas, quiet.With().Str("component", "router").Logger())
	rcfg.Registerer = n.reg
	// The router sends each engine its key: the built-in engines' (this
	// node's and the other nodes'), or an external engine's own.
	bkey, hkeys, err := wiring.EngineKeys(cfg.Engines)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	// This process's engines are served in process (no socket per turn).
	n.routerUp = routerUpstream()
	rcfg.Transport = n.routerUp
	if n.opts.RouterTransport != nil {
		rcfg.Transport = n.opts.RouterTransport(rcfg.Transport)
	}
	if bkey != "" || slices.ContainsFunc(slices.Collect(maps.Values(hkeys)), func(k string) bool { return k != "" }) {
		rcfg.Transport = netx.KeyTransport(rcfg.Transport, bkey, hkeys)
	}
	if n.opts.RouterListen != "" {
		// Off loopback the proxy refuses to start without an admin token.
		rcfg.ListenAddr, rcfg.AdminToken = n.opts.RouterListen, n.opts.RouterAdminToken
	}
	if n.router, err = proxy.New(rcfg); err != nil {
		return fmt.Errorf("node: router: %w", err)
	}
	ln, err := net.Listen("tcp", rcfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("node: router listen: %w", err)
	}
	n.routerURL = "http://" + ln.Addr().String()
	rh := n.router.Handler()
	if n.opts.RouterHandler != nil {
		rh = n.opts.RouterHandler(rh)
	}
	n.routerUnreg = inproc.Default.Register(n.routerURL, rh)
	n.routerDone = make(chan struct{})
	go func() {
		defer close(n.routerDone)
		_ = n.router.Serve(ln) // router.front: fast or net_http (proxy.Config.Front)
	}()
	return nil
}

// startPublisher is what the trainer publishes its versions through:
// publisher.mode full swaps the in-process engines from memory, delta
// (the default) starts the weight sync; Options.AfterStep wraps either.
func (n *Node) startPublisher(ctx context.Context, baseDir string, ptr *pmodel.Trainer) (tpub publisher.Publisher, err error) {
	if n.opts.Stepper != nil {
		return n.opts.Stepper.Publisher, nil
	}
	n.pub = &inProcPublisher{mode: string(n.cfg.Trainer.PauseMode), router: n.router, log: n.opts.Logger, engines: n.engines}
	tpub = n.pub
	if n.cfg.Publisher.Mode == config.PublishDelta {
		if n.wsync, err = n.startWeightSync(ctx, baseDir); err != nil {
			return nil, err
		}
		tpub = n.wsync
	}
	if n.opts.AfterStep != nil {
		tpub = afterStepPublisher{Publisher: tpub, tr: ptr, after: n.opts.AfterStep}
	}
	return tpub, nil
}

// startTrainer starts trainer.backend: builtin (in process), exec (a
// child process over the worker bridge) or remote (a worker process; this
// node only loads the versions it announces onto its engines).
func (n *Node) startTrainer(ctx context.Context, ptr *pmodel.Trainer, tpub publisher.Publisher) (err error) {
	cfg := n.cfg
	tc := trainer.Config{RunID: cfg.Run.ID, Name: "trainer-0", NormStd: true, PublishRetry: publishRetry(cfg.Publisher),
		Microbatch: microbatchConfig(cfg.Trainer), Logger: n.opts.Logger.With().Str("actor", "trainer").Logger(),
		Subjects: trainer.Subjects{Train: n.subj.Train, Steps: n.subj.Steps, Weights: n.subj.Weights},
		OnStep: func(rec trainer.StepRecord) {
			tok, ok := n.ledger.tokensNow()
			n.steplog.add(rec, tok, ok)
		}, Batches: n.batchSource()}
	switch cfg.Trainer.Backend {
	case config.BackendRemote:
		if n.weightsSub, err = n.bus.Subscribe(n.subj.Weights, n.loadWeights); err != nil {
			return fmt.Errorf("node: weights: %w", err)
		}
		return nil
	case config.BackendExec:
		var initial *pmodel.Model
		if ptr != nil {
			initial = ptr.ServingCopy()
		}
		if n.tr, err = n.startExecTrainer(ctx, initial, tpub, tc); err == nil {
			n.ledger.trainerInProcess()
		}
		return err
	default:
		if s := n.opts.Stepper; s != nil {
			tc.VersionBase = s.Stepper.Version()
			if n.tr, err = trainer.StartStepper(n.bus, s.Stepper, s.Publisher, tc); err == nil {
				n.ledger.trainerInProcess()
			}
			return err
		}
		tc.VersionBase = ptr.Version()
		n.tr, err = trainer.Start(n.bus, ptr, tpub, tc)
		if err == nil {
			n.ledger.trainerInProcess()
		}
		return err
	}
}

// filterConfig is the dynamic-sampling filter of the run.
func filterConfig(cfg config.Config) filter.Config {
	return filter.Config{Mode: filter.Mode(cfg.Filter.Mode), TrainBatchSize: cfg.Trainer.MiniBatchSize,
		NSamplesPerPrompt: cfg.Rollout.NSamplesPerPrompt, MaxSampleBatches: cfg.Filter.MaxSampleBatches,
		MinReplaceRatio: cfg.Filter.MinReplaceRatio, ZeroVarianceTol: cfg.Filter.ZeroVarianceTol}
}

// startSampling starts the sampling actor on the trajectory buffer: kept
// groups go on by reference, and a group the controller's ledger settled
// is deleted from the buffer (issue 31: batches by reference).
func (n *Node) startSampling(fcfg filter.Config) (err error) {
	scfg := sampling.Config{Filter: fcfg, RunID: n.cfg.Run.ID, Sender: "sampling-0", Kept: n.subj.Kept, Filtered: n.subj.Filtered}
	shell := actors.DefaultShellConfig("sampling-0", "sampling")
	if n.groupStream == nil {
		n.smp, err = sampling.Spawn(n.sys, n.bus, shell, scfg, n.subj.Trajectories, nil)
		return err
	}
	n.smp, err = sampling.SpawnBuffer(n.sys, n.bus, shell, scfg, sampling.Buffer{Stream: n.groupStream, Ledger: n.subj.Ledger,
		Logger: n.opts.Logger.With().Str("actor", "sampling").Logger()})
	return err
}

// batchSource is where the trainer fetches the groups a TrainBatch
// references: the trajectory buffer, read by sequence.
func (n *Node) batchSource() trainer.BatchSource {
	sr, ok := n.groupStream.(transport.StoredReader)
	if !ok {
		return nil // no buffer: groups travel inline
	}
	return trainer.StreamSource{Stream: sr, Name: n.subj.GroupStream,
		OnRetry: trainer.LogFetchRetries(n.opts.Logger.With().Str("actor", "trainer").Logger())}
}

// countTokens lets the ledger read the rollout actors' token counts.
func (n *Node) countTokens() {
	rollouts := n.rollouts // fixed from here on; read by the ledger's goroutine
	n.ledger.mu.Lock()
	n.ledger.tokens = func() int64 {
		var t int64
		for _, r := range rollouts {
			t += r.Stats().Tokens
		}
		return t
	}
	n.ledger.mu.Unlock()
}

// startMetrics registers the loop's figures and serves them on
// metrics.listen when set.
func (n *Node) startMetrics() error {
	if err := n.registerMetrics(n.reg); err != nil {
		return err
	}
	if n.cfg.Metrics.Listen != "" {
		return n.serveMetrics(n.cfg.Metrics.Listen, n.reg)
	}
	return nil
}

// controllerConfig is the staleness controller's config for the run.
func (n *Node) controllerConfig(fcfg filter.Config) controller.Config {
	cfg := n.cfg
	ccfg := controller.Config{
		Staleness: staleness.Config{MaxStalenessSteps: int64(cfg.Trainer.MaxStalenessSteps),
			NumParallelGenerationWorkers: int64(cfg.Trainer.NumParallelGenerationWorkers),
			MiniBatchSize:                int64(cfg.Trainer.MiniBatchSize), StalePolicy: staleness.StalePolicy(cfg.Trainer.StalePolicy),
			Measure: staleness.Measure(cfg.Staleness.Measure)},
		Sampling: fcfg, Rand: rand.New(rand.NewPCG(uint64(cfg.Run.Seed), 0x5a4d)), // replace mode's donor draws
		RunID: cfg.Run.ID, Sender: "controller-0", Task: n.task.Name(), NSamples: cfg.Rollout.NSamplesPerPrompt,
		MaxSteps: int64(cfg.Run.Steps), ResendTrainAfter: n.opts.ResendTrainAfter,
		Subjects: controller.Subjects{Prompts: n.subj.Prompts, Train: n.subj.Train, Capacity: n.subj.Capacity,
			Ledger: n.subj.Ledger, Settled: n.subj.Settled},
	}
	if ccfg.ResendTrainAfter <= 0 {
		ccfg.ResendTrainAfter = defaultResendTrainAfter(cfg.Trainer.Backend)
	}
	return ccfg
}

// defaultResendTrainAfter is how long the controller waits for a StepDone
// before it sends the step's TrainBatch again: 5 s, for a remote worker
// that connected late; 30 s with the exec backend, whose child is started
// before the run and whose steps (a PyTorch model on a real vocabulary)
// take tens of seconds — a resend every 5 s there only re-delivers a batch
// the trainer is already stepping, and warns about it.
func defaultResendTrainAfter(b config.TrainerBackend) time.Duration {
	if b == config.BackendExec {
		return 30 * time.Second
	}
	return 5 * time.Second
}

// startController starts the staleness controller, which starts handing
// out prompts; with remote engines, once one of them is routable (the
// controller's first prompts would only fail against a router with
// nothing routable).
func (n *Node) startController(ctx context.Context, fcfg filter.Config) (err error) {
	if n.remote != nil {
		if err := n.remote.waitRoutable(ctx); err != nil {
			return fmt.Errorf("node: waiting for engines: %w", err)
		}
	}
	src := func() controller.Source { return newTaskSource(n.task, n.cfg.Run.Seed) }
	if n.opts.Source != nil {
		src = n.opts.Source
	}
	shell := actors.DefaultShellConfig("controller-0", "controller")
	if n.opts.ControllerMailbox > 0 {
		shell.MailboxCapacity = n.opts.ControllerMailbox
	}
	n.ctl, err = controller.Spawn(n.sys, n.bus, shell, n.controllerConfig(fcfg),
		controller.Inputs{Aborted: n.subj.Aborted, Groups: n.subj.GroupsAll, Steps: n.subj.Steps}, src)
	return err
}

func (n *Node) startRollouts() error {
	count, ecfg, supportK := rollouthost.Setup(n.cfg, n.opts.RolloutActors)
	tokDir := wiring.RunTokenizer(n.cfg, n.tok)
	vocab, err := wiring.VocabularyFrom(tokDir)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	ecfg.Vocab = vocab
	if ecfg.Chat, err = wiring.ChatFormat(n.cfg.Rollout, tokDir); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	n.rolloutUp = rolloutTransport()
	var rt http.RoundTripper = n.rolloutUp
	if n.opts.RolloutClient != nil {
		rt = n.opts.RolloutClient(rt)
	}
	n.httpc = &http.Client{Transport: rt}
	proto, err := rollouthost.Protocol(n.cfg.Engines)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	var gen rollout.Generator = &rollout.HTTPClient{BaseURL: n.routerURL, Model: n.cfg.Engines.ServedModelName, Client: n.httpc,
		SupportFromLogprobs: n.cfg.Rollout.SupportFromLogprobs, Protocol: proto}
	if n.opts.Generator != nil {
		gen = n.opts.Generator(gen)
	}
	groups := n.groupStream
	if n.opts.GroupStream != nil && groups != nil {
		groups = n.opts.GroupStream(groups)
	}
	for i := range count {
		rc := rollouthost.ActorConfig(n.cfg, n.task, "rollout-"+strconv.Itoa(i), ecfg, supportK, n.subj, groups, n.opts.Logger, nil, n.ledger.published)
		rc.StoreConcurrency = n.opts.StoreConcurrency // 0: rollout's default
		a, err := rollout.Start(n.bus, gen, rc)
		if err != nil {
			return err
		}
		n.rollouts = append(n.rollouts, a)
	}
	return nil
}
