package node

import (
	"context"
	"io"
	"net/http"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors/controller"
	"github.com/asyncrl/asyncrl/actors/publisher"
	"github.com/asyncrl/asyncrl/actors/rollout"
	"github.com/asyncrl/asyncrl/actors/trainer"
	"github.com/asyncrl/asyncrl/actors/trainer/bridge"
	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/wiring"
)

// Options are the node's process-level settings (the rest is config).
type Options struct {
	// Logger receives the actors' and engines' logs.
	Logger zerolog.Logger
	// Progress receives the live progress view; nil prints nothing.
	Progress io.Writer
	// Terminal makes the progress view one updating line (\r) instead of
	// one line per step.
	Terminal bool
	// InMemoryBus keeps the embedded JetStream store in a temporary
	// directory (tests) instead of bus.jetstream_dir / run.data_dir.
	InMemoryBus bool
	// BusSecurity, when set, is the bus connection's credentials and TLS
	// instead of the config's bus section (an agent's term connects as the
	// agent does).
	BusSecurity *wiring.BusSecurity
	// ResendTrainAfter is how long the controller waits for a StepDone
	// before sending the step's TrainBatch again (a remote worker that
	// connected late); 0 means 5 s, 30 s with the exec backend
	// (defaultResendTrainAfter).
	ResendTrainAfter time.Duration
	// OnStart, when set, is called once everything runs (e.g. to print
	// BusURL for a remote trainer worker).
	OnStart func(*Node)
	// RolloutActors overrides the number of rollout actors; 0 sizes it so
	// W groups of n trajectories can run at once (ceil(W·n/concurrency)).
	RolloutActors int
	// TrainerCheckpoint, when set, is a trainer checkpoint directory
	// (model.SaveTrainer) the trainer starts from instead of the run
	// seed's initial weights. From the checkpoint: master weights, Adam
	// moments, optimiser step and RNG state; from this run's config: every
	// trainer hyperparameter (and the worker count). Version 0 of this run
	// is its serving copy; the versions on the bus count from there
	// (trainer.Config.VersionBase), while the trainer's own step count goes
	// on for Adam's bias correction. The directory is only read.
	TrainerCheckpoint string
	// AfterStep, when set, runs in the trainer's goroutine after each new
	// version was published and before the step is recorded, while tr
	// holds exactly that version (version is this run's, counted from 0;
	// the cluster agent checkpoints it there). An error is retried with
	// the version's publish, as a failed publish is (publisher.attempts,
	// publisher.retry_backoff): the step is not acknowledged before it
	// succeeds, and after the last try training stops with an error
	// naming the checkpoint. It may thus run more than once per version.
	AfterStep func(ctx context.Context, tr *model.Trainer, version int64) error
	// ExecCheckpoint, with trainer.backend exec, is a resume state the
	// trainer child wrote (one rank's, or a worker group's shards and
	// manifest) that the child starts from, at ExecCheckpointVersion (the
	// state's step); version 0 of this run is its weights. AfterExecStep is
	// AfterStep's counterpart: it gets the child's state directory of each
	// new version (the cluster agent uploads it), its error retried as
	// AfterStep's is.
	ExecCheckpoint        string
	ExecCheckpointVersion int64
	AfterExecStep         func(ctx context.Context, state string, version int64) error
	// ExecRemote starts the ranks of a trainer group that runs on other
	// nodes (trainer.exec_nodes > 1; the cluster agent's term passes
	// cluster/rankhost's Links), ExecRendezvousAddr is this node's address
	// their ranks reach rank 0's rendezvous at ("" = 127.0.0.1). A group
	// over several nodes needs ExecRemote: without it the start fails.
	ExecRemote         bridge.RemoteRanks
	ExecRendezvousAddr string
	// OnStartPhase, when set, hears each phase Start reaches (the cluster
	// agent's term reports them to its core: a start that stalls is
	// reported with the last phase it reached). Called on Start's
	// goroutine; it must not block (Start waits).
	OnStartPhase func(phase string)
	// BeforeAnnounce, when set (tests: the cluster agent's hold points),
	// runs once each version's weights are written and before the engines
	// and the router hear of it (version is this run's), on the trainer's
	// goroutine: the step waits while it blocks, which is what a hold is for.
	BeforeAnnounce func(version int64)
	// RouterListen is the router's address (host:port; default
	// 127.0.0.1:0). Rollout actors on other machines need a reachable one;
	// off loopback RouterAdminToken is required (the admin API).
	RouterListen, RouterAdminToken string
	// Remote, when set, makes the pipeline start no engines of its own and
	// serve from the engines of other nodes (the cluster agent's terms;
	// see RemoteEngines). It needs publisher.mode delta and
	// publisher.store nats.
	Remote *RemoteEngines
	// KeepGroupRecords keeps every group's record in the ledger view for
	// the whole run (Ledger.Snapshot: the chaos audit compares it with the
	// durable ledger). By default a settled group's record is dropped once
	// RecordSteps steps passed without news of it: a days-long run kept
	// ~200 B per group, forever.
	KeepGroupRecords bool
	// GroupDuplicates is the trajectory buffer's duplicate window (how
	// long the server remembers a stored group's id so that a retried
	// store lands once); 0 is JetStream's default, 2 minutes, above the
	// rollout actors' 60 s of store retries. The server keeps every group
	// id of the window: a test that measures the heap per settled group
	// shortens it so that the window fills within the test.
	GroupDuplicates time.Duration
	// The parts below swap a piece of the pipeline for the caller's
	// (bench/scale: a trainer that trains nothing, a prompt source that
	// ends, hash-model engines, timed transports). Unset, the pipeline is
	// `asyncrl run`'s.

	// Stepper, when set, is the trainer actor's Stepper and Publisher in
	// place of the built-in trainer: no trainer policy is built, no weight
	// sync starts, and the trainer's versions count from
	// Stepper.Stepper.Version(). It needs trainer.backend builtin and no
	// Remote.
	Stepper *Stepper
	// Source, when set, makes the controller's prompt source in place of
	// the run seed's draws of rollout.task (controller.Spawn's newSource:
	// called on Start's goroutine before the first prompt is taken, and
	// again for each restart of the controller's core); a source that
	// answers false hands out no more prompts.
	Source func() controller.Source
	// Engines, when set, are the run's built-in engines, built by the
	// caller (e.g. engine.HashModel on a fast latency model) in place of
	// engines.count engines of the policy: each is served like a started
	// one (localengine.Serve) and the node owns them from Start (Stop
	// closes them). engines.count is then not read.
	Engines []*engine.Engine
	// ControllerMailbox, when > 0, is the controller shell's mailbox
	// capacity (actors.DefaultShellConfig's otherwise).
	ControllerMailbox int
	// RouterTransport, when set, wraps the router's transport to the
	// engines (this process's engines are served in process by the
	// transport it is handed): it may time the router's calls, or return
	// a transport of its own (sockets).
	RouterTransport func(http.RoundTripper) http.RoundTripper
	// RouterHandler, when set, wraps the router's handler where this
	// process's rollout actors reach it (in process, inproc.Default); the
	// router's own listener serves it unwrapped.
	RouterHandler func(http.Handler) http.Handler
	// RolloutClient, when set, wraps the rollout actors' transport to the
	// router (it may return a transport of its own).
	RolloutClient func(http.RoundTripper) http.RoundTripper
	// Generator, when set, wraps the rollout actors' turn generator (one
	// for all of them; it must be safe for concurrent use).
	Generator func(rollout.Generator) rollout.Generator
	// GroupStream, when set, wraps the trajectory buffer as the rollout
	// actors store into it (the sampling actor and the trainer read the
	// buffer itself).
	GroupStream func(transport.Stream) transport.Stream
	// StoreConcurrency, when > 0, bounds each of this process's rollout
	// actors' stores waiting on the trajectory buffer at once
	// (rollout.Config.StoreConcurrency) in place of rollout's default, 32
	// (0). bench/scale's -store-concurrency sets it (a level measured with
	// the bound lifted, or tightened); a negative value is refused.
	StoreConcurrency int
}

// Stepper is a trainer in place of the built-in one (Options.Stepper).
type Stepper struct {
	// Stepper takes the steps; its Version is the first version.
	Stepper trainer.Stepper
	// Publisher publishes each step's weights (to the engines, or nowhere).
	Publisher publisher.Publisher
}
