package node

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors/publisher"
	"github.com/asyncrl/asyncrl/actors/trainer"
	"github.com/asyncrl/asyncrl/actors/trainer/steprule"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/messages"
	pmodel "github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
	"github.com/asyncrl/asyncrl/wiring"
)

// loadWeights applies a version a remote trainer announced: load its
// serving checkpoint, make it live on this node's engines (pause, swap,
// resume, router versions) and acknowledge it, so the trainer may
// announce StepDone.
func (n *Node) loadWeights(msg *transport.Msg) {
	wp, err := messages.DecodeAs[messages.WeightsPublished](msg.Data)
	if err != nil || wp.RunID != n.cfg.Run.ID {
		return
	}
	dir, ok := strings.CutPrefix(wp.URI, "file://")
	if !ok {
		n.opts.Logger.Warn().Str("uri", wp.URI).Msg("weights: only file:// versions can be loaded by the node")
		return
	}
	if n.wsync != nil {
		n.publishRemote(wp.Version, dir)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := n.pub.Publish(ctx, publisher.Weights{Dir: dir}, wp.Version); err != nil {
		n.opts.Logger.Error().Err(err).Int64("version", wp.Version).Msg("weights: engines not updated")
		return
	}
	n.ackVersion(wp.Version)
}

// ackVersion tells a remote trainer that version is live on this node.
func (n *Node) ackVersion(version int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	data, err := messages.Encode(messages.EngineVersionAck{
		Header: messages.Header{RunID: n.cfg.Run.ID, Sender: "node", Version: version}, Engine: "node", URL: n.routerURL})
	var subj string
	if err == nil {
		subj, err = nodeAck(n.subj)
	}
	if err == nil {
		err = n.bus.Publish(ctx, subj, data)
	}
	if err != nil {
		n.opts.Logger.Error().Err(err).Msg("weights: ack not sent")
	}
}

// publishRemote ships a remote trainer's version to the engines as a
// delta (publisher.mode delta): the engines' own acks (on the pattern the
// worker waits on) tell the worker the version is live. The worker
// repeats an announcement until it sees an ack (BusPublisher.Resend), and
// announces a version again when its publish failed (its step rule's
// retry); announcements arrive one at a time (one subscription), so a
// repeat is never handled while the version's publish is still running.
func (n *Node) publishRemote(version int64, dir string) {
	ctx, cancel := context.WithTimeout(n.wsync.Context(), time.Minute)
	defer cancel()
	var err error
	switch cur := n.wsync.Current(); {
	case version > cur:
		err = n.wsync.PublishDir(ctx, dir, version, time.Now())
		n.remoteRetry.published(version, n.cfg.Publisher.RetryBackoff, time.Now())
	case n.served(version):
		// A repeat of a live version: the worker's ack may have been
		// lost (bus reconnect). Once some engine serves the version (it
		// is routable; the minimum itself trails the target by the
		// staleness budget), acknowledge it again.
		n.ackVersion(version)
		return
	case version == cur:
		// A repeat of the newest version, which no engine serves: its
		// publish failed (every engine failed it). Publish it again —
		// the engines that failed it are told again (Sync.Retry) — so
		// an engine that is back answers the worker with its ack
		// instead of the worker waiting out its ack timeout. Not on
		// every repeat (one every BusPublisher.Resend): an engine that
		// keeps refusing the version would load it every few seconds;
		// the tries are spaced as the in-process trainer's are
		// (publisher.retry_backoff, doubling up to steprule.MaxBackoffCap), and
		// a repeat before the next try is ignored.
		if !n.remoteRetry.due(version, time.Now()) {
			return
		}
		err = n.wsync.Retry(ctx, version)
		n.remoteRetry.retried(version, n.cfg.Publisher.RetryBackoff, time.Now())
	default:
		return // older than the newest version and not served: superseded
	}
	if err != nil {
		n.opts.Logger.Error().Err(err).Int64("version", version).Msg("weights: version not published to the engines")
	}
}

// remoteRetry spaces the tries of a remote trainer's newest version that
// no engine serves: the first retry is due publisher.retry_backoff after
// its publish ended, each later one after twice the previous wait, up to
// steprule.MaxBackoffCap. Only the weights subscription's handler (one message
// at a time) touches it.
type remoteRetry struct {
	version int64
	next    time.Time     // when the next retry is due
	wait    time.Duration // the wait before next, doubled after each retry
}

// published starts the schedule of version, whose publish just ended.
func (r *remoteRetry) published(version int64, backoff time.Duration, now time.Time) {
	*r = remoteRetry{version: version, wait: backoff, next: now.Add(backoff)}
}

// due reports whether a retry of version is due at now.
func (r *remoteRetry) due(version int64, now time.Time) bool {
	return version != r.version || !now.Before(r.next)
}

// retried schedules the next retry of version after a retry that ended
// at now (a version whose publish this node did not run, as after a
// restart, starts at backoff).
func (r *remoteRetry) retried(version int64, backoff time.Duration, now time.Time) {
	if version != r.version || r.wait <= 0 {
		r.version, r.wait = version, backoff
	} else {
		r.wait = min(2*r.wait, max(steprule.MaxBackoffCap, r.wait))
	}
	r.next = now.Add(r.wait)
}

// served reports whether some engine serves version or a later one.
func (n *Node) served(version int64) bool {
	for _, st := range n.wsync.shell.Engines() {
		if st.Serving >= version {
			return true
		}
	}
	return false
}

// WorkerOptions configures RunWorker.
type WorkerOptions struct {
	// NATSURL is the run's bus (the URL `asyncrl run` prints).
	NATSURL string
	// Logger receives the worker's logs.
	Logger zerolog.Logger
	// Exec runs the steps in a child process over the worker bridge (the
	// exec backend) instead of in this process: ExecArgv, or trainer.exec
	// when ExecArgv is empty. The bus side is unchanged.
	Exec     bool
	ExecArgv []string
}

// RunWorker runs a remote trainer worker until ctx ends: it takes the
// run's TrainBatch messages from the bus, trains the built-in policy
// (started from the same seed as the node's engines, so version 0 agrees),
// writes each version's serving checkpoint to publisher.sync_dir (default
// <run.data_dir>/weights), waits for the node's ack and announces
// StepDone. Run one worker per run (the steps are sequential).
func RunWorker(ctx context.Context, cfg config.Config, opts WorkerOptions) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if opts.NATSURL == "" {
		return fmt.Errorf("%w: the worker needs the run's NATS URL", ErrConfig)
	}
	s, err := transport.Plan(cfg.Run.ID)
	if err != nil {
		return fmt.Errorf("%w: run.id: %w", ErrConfig, err)
	}
	bopts := natsbus.DefaultOptions()
	bopts.URL, bopts.Name, bopts.Logger = opts.NATSURL, "asyncrl-worker-"+cfg.Run.ID, opts.Logger
	// The config's bus credentials and TLS (a worker is a pipeline
	// client: it publishes StepDone and reads the trainer's subjects).
	sec, err := wiring.BusSecurityFrom(cfg.Bus)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	sec.Apply(&bopts)
	bus, err := natsbus.Connect(ctx, bopts)
	if err != nil {
		return fmt.Errorf("worker: bus: %w", err)
	}
	defer bus.Close()
	model, err := pmodel.New(wiring.PolicyModel(cfg), uint64(cfg.Run.Seed))
	if err != nil {
		return err
	}
	ptr, err := pmodel.NewTrainer(model, trainerConfig(cfg))
	if err != nil {
		return fmt.Errorf("%w: trainer: %w", ErrConfig, err)
	}
	dir := cfg.Publisher.SyncDir
	if dir == "" {
		dir = filepath.Join(cfg.Run.DataDir, "weights")
	}
	pub := &publisher.BusPublisher{Bus: bus, RunID: cfg.Run.ID, Sender: "worker", Dir: dir, Weights: s.Weights, Acks: s.AcksAll}
	tcfg := trainer.Config{RunID: cfg.Run.ID, Name: "worker", NormStd: true, PublishRetry: publishRetry(cfg.Publisher),
		Microbatch: microbatchConfig(cfg.Trainer), Logger: opts.Logger,
		Subjects: trainer.Subjects{Train: s.Train, Steps: s.Steps}, Batches: newBoundSource(bus, s.GroupStream, opts.Logger)}
	var tr *trainer.Actor
	if opts.Exec {
		ex, err := startExec(ctx, cfg, ptr.ServingCopy(), opts.ExecArgv, opts.Logger)
		if err != nil {
			return err
		}
		if tr, err = trainer.StartStepper(bus, ex, pub, tcfg); err != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			return errors.Join(err, ex.Close(cctx))
		}
	} else if tr, err = trainer.Start(bus, ptr, pub, tcfg); err != nil {
		return err
	}
	opts.Logger.Info().Str("nats", opts.NATSURL).Str("run", cfg.Run.ID).Str("weights", dir).Msg("trainer worker ready")
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var runErr error
	for runErr == nil && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
			runErr = tr.Err()
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return errors.Join(runErr, tr.Stop(sctx))
}

// boundSource is a remote worker's trainer.BatchSource: the pipeline
// holder's trajectory buffer, bound (never created) at the first stored
// reference — the holder may make it after the worker started. The bind
// is the fetch's first try: one the buffer fails transiently is tried
// again under the fetch rule, sharing the window with the reads
// (trainer.StreamSource.Bind).
type boundSource struct {
	name string
	// bindStream is the bus's BindStream (a test wraps it).
	bindStream func(ctx context.Context, name string) (transport.Stream, error)
	onRetry    func(group string, try int, err error)
	mu         sync.Mutex
	sr         transport.StoredReader
}

func newBoundSource(bus *natsbus.Bus, name string, log zerolog.Logger) *boundSource {
	return &boundSource{name: name, bindStream: bus.BindStream, onRetry: trainer.LogFetchRetries(log)}
}

// bind binds the buffer once; later calls return what it bound.
func (b *boundSource) bind(ctx context.Context) (transport.StoredReader, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sr != nil {
		return b.sr, nil
	}
	st, err := b.bindStream(ctx, b.name)
	if err != nil {
		return nil, fmt.Errorf("worker: trajectory buffer %s: %w", b.name, err)
	}
	sr, ok := st.(transport.StoredReader)
	if !ok {
		return nil, fmt.Errorf("worker: trajectory buffer %s cannot be read by sequence", b.name)
	}
	b.sr = sr
	return sr, nil
}

func (b *boundSource) Fetch(ctx context.Context, group string, ref messages.BatchRef) ([]byte, error) {
	return trainer.StreamSource{Bind: b.bind, Name: b.name, OnRetry: b.onRetry}.Fetch(ctx, group, ref)
}
