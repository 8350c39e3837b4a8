package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/cluster"
	"github.com/asyncrl/asyncrl/cluster/discovery"
	"github.com/asyncrl/asyncrl/cluster/lease"
	"github.com/asyncrl/asyncrl/cluster/ledger"
	"github.com/asyncrl/asyncrl/cluster/placement"
	"github.com/asyncrl/asyncrl/cluster/termwatch"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// ErrAgentConfig wraps problems with an AgentConfig (bad roles, addresses).
var ErrAgentConfig = errors.New("node: invalid agent configuration")

// AgentConfig configures one cluster node (asyncrl node).
type AgentConfig struct {
	// Name is the node's unique name; a second live process with the same
	// name is refused (cluster.ClaimName).
	Name string
	// Roles the node runs (placement.ParseRoles: all, bus, engine, router,
	// rollout, filter, trainer, publisher, controller).
	Roles []string
	// NATSURL of an existing NATS cluster (comma-separated URLs). Empty
	// hosts an embedded nats-server with JetStream.
	NATSURL string
	// ClusterListen is the embedded server's route listen address
	// (host:port); with Routes it makes the embedded servers of several
	// nodes one NATS cluster. Empty: a standalone embedded server.
	ClusterListen string
	// Routes are the route URLs of every member's embedded server
	// (nats-route://host:port), this node's included.
	Routes []string
	// Gossip is the memberlist bind address (host:port; port 0 picks one).
	Gossip string
	// Join lists gossip addresses of existing members (empty for the first).
	Join []string
	// GPUs is advertised in the node's metadata (gpu.Probe's device count).
	GPUs int
	// Replicas is the replication factor of the lease bucket and the
	// durable ledger (3 on a three-server cluster; default 1).
	Replicas int
	// LeaseTTL is the singleton leases' TTL (default 3s): the takeover bound.
	LeaseTTL time.Duration
	// StallAfter: a trainer holder whose term completed no step for this
	// long steps down, so a clean term starts from the durable step
	// (default 10m; keep it above the slowest step). UnhealthyAfter: the
	// same when a JetStream stream the term depends on failed every probe
	// for this long (default 30s; an election takes 4–9 s).
	StallAfter, UnhealthyAfter time.Duration
	// Run is the run configuration (the same file on every node).
	Run config.Config
	// Logger receives the node's logs.
	Logger zerolog.Logger
	// Events, when set, receives one line per cluster event ("node n1:
	// lease trainer acquired token 7"); operators and tests read it.
	Events io.Writer
	// InMemoryBus keeps the embedded server's JetStream files in a
	// temporary directory (tests).
	InMemoryBus bool
	// RouterListen is where the router of this node's terms listens
	// (host:port, a specific host: rollout nodes on other machines dial
	// it); default 127.0.0.1 on a free port. Off loopback
	// RouterAdminToken is required.
	RouterListen, RouterAdminToken string
}

// Agent is a running cluster node: bus, name claim, gossip membership and
// the lease of each singleton role it may hold. The holder of the trainer
// lease runs the training pipeline (see the package doc); standbys wait.
type Agent struct {
	cfg   AgentConfig
	log   zerolog.Logger
	bus   *natsbus.Bus
	guard *cluster.NameGuard
	ms    *cluster.Membership
	led   *ledger.Ledger
	// leavingSub receives the other members' NodeLeaving.
	leavingSub transport.Subscription
	// host runs the node's engines (the engine role) for the holder.
	host *engineHost
	// rollouts runs rollout actors for the holder's term (the rollout
	// role), unless this node holds the lease.
	rollouts *rolloutHost
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	mu      sync.Mutex
	quorum  *cluster.Quorum
	final   *LedgerCounts // set when this node finished the run
	evMu    sync.Mutex
	done    chan struct{} // closed when the run's steps are all trained
	doneOne sync.Once
	stopOne sync.Once
	// stopping: Stop has begun; the name claim's loss is then expected.
	stopping atomic.Bool
	// stepdowns counts the terms this node gave up as stalled; registered
	// on each term's registry.
	stepdowns *prometheus.CounterVec
	// beforeSave, when set (tests), runs before each step's progress is
	// saved: a test deposes the holder there.
	beforeSave func(ctx context.Context, step int64)
}

// ParseAgentRoles validates a --roles value; the error lists the known roles.
func ParseAgentRoles(s string) ([]string, error) {
	r, err := placement.ParseRoles(s)
	if err != nil {
		return nil, fmt.Errorf("%w: --roles: %w", ErrAgentConfig, err)
	}
	return r, nil
}

func (c AgentConfig) has(role string) bool {
	return slices.Contains(c.Roles, role) || slices.Contains(c.Roles, placement.All)
}

// StartAgent validates cfg, connects to (or hosts) the bus, claims the node
// name, joins gossip and starts contending for the singleton leases of its
// roles. On error everything started is stopped.
func StartAgent(ctx context.Context, cfg AgentConfig) (a *Agent, err error) {
	if _, err := placement.ValidateRoles(cfg.Roles); err != nil {
		return nil, fmt.Errorf("%w: --roles: %w", ErrAgentConfig, err)
	}
	if cfg.Name == "" {
		return nil, fmt.Errorf("%w: --name is required", ErrAgentConfig)
	}
	if err := cfg.Run.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if cfg.RouterListen != "" {
		h, _, err := net.SplitHostPort(cfg.RouterListen)
		if err != nil {
			return nil, fmt.Errorf("%w: --router-listen %q: %w", ErrAgentConfig, cfg.RouterListen, err)
		}
		if ip := net.ParseIP(h); h == "" || (ip != nil && ip.IsUnspecified()) {
			return nil, fmt.Errorf("%w: --router-listen %q: give the address other nodes reach this one at, not a wildcard", ErrAgentConfig, cfg.RouterListen)
		}
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 3 * time.Second
	}
	if cfg.StallAfter == 0 {
		cfg.StallAfter = termwatch.DefaultConfig().StallAfter
	}
	if cfg.UnhealthyAfter == 0 {
		cfg.UnhealthyAfter = termwatch.DefaultConfig().UnhealthyAfter
	}
	if err := (termwatch.Config{StallAfter: cfg.StallAfter, UnhealthyAfter: cfg.UnhealthyAfter}).Validate(); err != nil {
		return nil, fmt.Errorf("%w: --stall-after/--unhealthy-after: %w", ErrAgentConfig, err)
	}
	host, port := "127.0.0.1", 0
	if cfg.Gossip != "" {
		h, p, err := net.SplitHostPort(cfg.Gossip)
		if err != nil {
			return nil, fmt.Errorf("%w: --gossip %q: %w", ErrAgentConfig, cfg.Gossip, err)
		}
		if port, err = strconv.Atoi(p); err != nil {
			return nil, fmt.Errorf("%w: --gossip %q: bad port", ErrAgentConfig, cfg.Gossip)
		}
		if h != "" {
			host = h
		}
	}
	a = &Agent{cfg: cfg, log: cfg.Logger, quorum: cluster.NewQuorum(cfg.Name), done: make(chan struct{}),
		stepdowns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "asyncrl_node_term_stepdowns_total",
			Help: "Terms this node gave up because they stalled (reason no_step or dependency)."}, []string{"reason"})}
	defer func() {
		if err != nil {
			a.Stop()
		}
	}()
	bopts := natsbus.DefaultOptions()
	bopts.URL, bopts.Name = cfg.NATSURL, cfg.Name
	bopts.MaxPayload = cfg.Run.Bus.MaxPayloadBytes
	bopts.Logger = a.log.With().Str("component", "bus").Logger()
	if cfg.NATSURL == "" {
		if cfg.ClusterListen != "" {
			bopts.Cluster = &natsbus.ClusterOptions{Name: "asyncrl-" + cfg.Run.Run.ID, Listen: cfg.ClusterListen, Routes: cfg.Routes}
		}
		if !cfg.InMemoryBus {
			bopts.StoreDir = filepath.Join(cfg.Run.Run.DataDir, "jetstream", cfg.Name)
			if err := os.MkdirAll(bopts.StoreDir, 0o755); err != nil {
				return a, fmt.Errorf("node: jetstream dir: %w", err)
			}
		}
	}
	if a.bus, err = natsbus.Connect(ctx, bopts); err != nil {
		return a, fmt.Errorf("node: bus: %w", err)
	}
	a.event("bus %s", a.bus.ClientURL())
	if err := waitJetStream(ctx, a.bus, 60*time.Second); err != nil {
		return a, err
	}
	host0, _ := os.Hostname()
	inst := fmt.Sprintf("%s:%d:%d", host0, os.Getpid(), time.Now().UnixNano())
	// The names bucket is created here with the cluster's replication
	// (ClaimName would create it with one replica, so the claims of every
	// node would die with the server that hosts it).
	if err = retry(ctx, 30*time.Second, func() error {
		return ensureKV(ctx, a.bus, cluster.NamesBucket, 3*time.Second, cfg.Replicas)
	}); err != nil {
		return a, fmt.Errorf("node: names bucket: %w", err)
	}
	claim := cluster.NameClaim{Name: cfg.Name, Instance: inst, Logger: a.log, OnLost: func() {
		if !a.stopping.Load() {
			a.event("name claim lost")
		}
	}}
	// A fresh clustered JetStream can time out creating the names bucket
	// while its servers settle; only ErrNameInUse is an answer.
	if err = retry(ctx, 30*time.Second, func() error {
		a.guard, err = cluster.ClaimName(ctx, a.bus.Conn(), claim)
		if errors.Is(err, cluster.ErrNameInUse) {
			return backoff.Permanent(err)
		}
		return err
	}); err != nil {
		return a, err
	}
	// A member that says it is leaving cleanly stops voting; gossip alone
	// would count it as failed, and with two members the lower-named one's
	// clean exit would stop the other (cluster.DecideQuorum).
	if a.leavingSub, err = a.bus.Subscribe(leavingSubject(cfg.Run.Run.ID), a.onLeaving); err != nil {
		return a, fmt.Errorf("node: leave notices: %w", err)
	}
	meta := cluster.NodeMeta{Roles: cfg.Roles, GPUs: cfg.GPUs, Endpoints: map[string]string{"nats": a.bus.ClientURL()}}
	if cfg.has(placement.Engine) {
		// The engines listen before the node joins gossip: their URLs are
		// in the metadata the other members learn it from.
		if a.host, err = startEngineHost(cfg.Run, cfg.Name, a.bus, a.log, a.event); err != nil {
			return a, err
		}
		maps.Copy(meta.Endpoints, a.host.endpoints())
		a.event("engines %s", strings.Join(slices.Sorted(maps.Values(a.host.endpoints())), " "))
	}
	if u := a.bus.ClusterURL(); u != "" {
		meta.Endpoints["route"] = u
	}
	mc := cluster.DefaultMembershipConfig(cfg.Name)
	mc.BindAddr, mc.BindPort, mc.Join, mc.Meta = host, port, cfg.Join, meta
	a.quorum.Joined(cfg.Name)
	mc.OnJoin = func(m cluster.Member) {
		a.mu.Lock()
		a.quorum.Joined(m.Name)
		a.mu.Unlock()
		a.event("member joined %s roles %s", m.Name, strings.Join(m.Meta.Roles, ","))
	}
	mc.OnLeave = func(m cluster.Member) {
		if m.Name == cfg.Name {
			return // this node's own leave, at Stop
		}
		a.mu.Lock()
		a.quorum.Failed(m.Name)
		a.mu.Unlock()
		a.event("member left %s", m.Name)
	}
	// The member named by --join may still be starting (three terminals
	// started at once): retry for a while.
	if err = retry(ctx, 30*time.Second, func() error {
		a.ms, err = cluster.JoinCluster(mc, a.log)
		return err
	}); err != nil {
		return a, err
	}
	a.event("gossip %s", a.ms.Addr())
	if cfg.has(placement.Rollout) {
		if a.rollouts, err = startRolloutHost(cfg.Run, cfg.Name, cfg.Replicas, a.bus, a.log, a.event); err != nil {
			return a, err
		}
	}
	rctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	if a.cfg.has(placement.Trainer) {
		lcfg := ledger.DefaultConfig(cfg.Run.Run.ID)
		lcfg.Replicas, lcfg.Logger = cfg.Replicas, a.log
		if err = retry(ctx, 30*time.Second, func() error {
			a.led, err = ledger.Open(ctx, a.bus.Conn(), lcfg)
			return err
		}); err != nil {
			return a, err
		}
		a.wg.Go(func() { a.contend(rctx) })
		a.wg.Go(func() { a.watchDone(rctx) })
	}
	return a, nil
}

// event writes one line to cfg.Events.
func (a *Agent) event(format string, args ...any) {
	a.log.Debug().Str("node", a.cfg.Name).Msgf(format, args...)
	if a.cfg.Events == nil {
		return
	}
	a.evMu.Lock()
	defer a.evMu.Unlock()
	fmt.Fprintf(a.cfg.Events, "node %s: %s\n", a.cfg.Name, fmt.Sprintf(format, args...))
}

// Bus is the node's bus.
func (a *Agent) Bus() *natsbus.Bus { return a.bus }

// Members lists the live members as this node sees them.
func (a *Agent) Members() []cluster.Member { return a.ms.Members() }

// Done is closed once the durable progress shows run.steps trained steps.
func (a *Agent) Done() <-chan struct{} { return a.done }

// quorate reports whether this node's side may train (cluster.Quorum).
func (a *Agent) quorate() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.quorum.Verdict().Train
}

// contend runs the trainer lease: while this node holds it (and its side
// has quorum) it runs the training pipeline; when the lease is lost, the
// side loses quorum or the pipeline fails, the pipeline stops, the lease is
// given up and the node goes back to standby.
func (a *Agent) contend(ctx context.Context) {
	for ctx.Err() == nil {
		if a.quorate() {
			a.contendOnce(ctx)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// contendOnce contends for the lease until ctx ends, quorum is lost or
// the pipeline fails.
func (a *Agent) contendOnce(ctx context.Context) {
	role := a.cfg.Run.Run.ID + "-" + placement.Trainer
	lc := lease.DefaultConfig(role, a.cfg.Name)
	lc.Timing, lc.Replicas, lc.Logger = lease.DefaultTiming(a.cfg.LeaseTTL), a.cfg.Replicas, a.log
	var (
		e       *lease.Elector
		err     error
		leading = make(chan lease.Status, 4)
	)
	// The elector outlives ctx until the pipeline stopped: resigning while
	// it still runs would let a standby start a term next to it.
	ectx, ecancel := context.WithCancel(context.Background())
	defer ecancel()
	// Once contendOnce stops reading (ectx cancelled), the elector's last
	// changes are dropped rather than block its Run.
	lc.OnChange = func(st lease.Status) {
		select {
		case leading <- st:
		case <-ectx.Done():
		}
	}
	for {
		if e, err = lease.New(ctx, a.bus.Conn(), lc); err == nil {
			break
		}
		a.log.Warn().Err(err).Msg("trainer lease: open bucket; retrying")
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
	edone := make(chan struct{})
	go func() { defer close(edone); _ = e.Run(ectx) }()
	defer func() { ecancel(); <-edone }()
	var (
		pcancel context.CancelFunc
		pdone   chan struct{}
	)
	stopPipeline := func() {
		if pcancel != nil {
			pcancel()
			<-pdone
			pcancel, pdone = nil, nil
		}
	}
	defer stopPipeline()
	failed := make(chan error, 1)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if pcancel != nil && !a.quorate() {
				a.event("lost quorum: training stops")
				stopPipeline()
				// Give the lease up so the majority side's standby can take
				// over without waiting for it to expire.
				ecancel()
				<-edone
				return
			}
		case st := <-leading:
			if !st.Leader {
				if pcancel != nil {
					a.event("lease %s lost", placement.Trainer)
				}
				stopPipeline()
				continue
			}
			if !a.quorate() {
				return // a minority must not sit on the lease: resign (deferred)
			}
			a.event("lease %s acquired token %d", placement.Trainer, st.Token)
			pctx, c := context.WithCancel(ctx)
			pcancel, pdone = c, make(chan struct{})
			go func(tok uint64, done chan struct{}) {
				defer close(done)
				if err := a.train(pctx, tok); err != nil && pctx.Err() == nil {
					a.event("training failed: %v", err)
					select {
					case failed <- err:
					default:
					}
				}
			}(st.Token, pdone)
		case <-failed:
			// Give the lease up so a standby tries instead.
			stopPipeline()
			ecancel()
			<-edone
			a.event("lease %s resigned after a failure", placement.Trainer)
			return
		}
	}
}

// train claims the durable progress with token, then runs the remaining
// steps of the run in a fresh pipeline on the cluster bus, saving the
// progress (fenced by token) after every step. The pipeline's trainer
// starts from the checkpoint the progress records (restored, verified;
// a missing or corrupt one fails the term), and every version it
// publishes is checkpointed (checkpoint.go) before the step's progress,
// which records its location, is saved.
func (a *Agent) train(ctx context.Context, token uint64) error {
	var prev, p ledger.Progress
	if err := retry(ctx, 30*time.Second, func() (err error) {
		prev, _, err = a.led.Progress(ctx)
		return err
	}); err != nil {
		return err
	}
	if err := retry(ctx, 30*time.Second, func() (err error) {
		p, err = a.led.Claim(ctx, token, a.cfg.Name)
		if errors.Is(err, lease.ErrFenced) {
			return backoff.Permanent(err)
		}
		return err
	}); err != nil {
		return err
	}
	// The previous holder's episodes in flight died with its pipeline:
	// requeue them in the durable ledger (after the claim, which fenced it).
	if prev.Holder != "" {
		// The prompts of the last durable step are trained (the durable
		// weights hold them) even if the previous holder died before it
		// marked them so: complete that first, then requeue the rest.
		if err := retry(ctx, 30*time.Second, func() error { return a.markTrained(ctx, prev.Step, prev.Prompts) }); err != nil {
			return fmt.Errorf("node: mark step %d's prompts trained: %w", prev.Step, err)
		}
		// The dead node's JetStream server may have led the ledger's
		// streams: retry while the survivors elect new leaders.
		var rq []ledger.Entry
		if err := retry(ctx, 30*time.Second, func() (err error) {
			rq, err = a.led.RequeueNode(ctx, prev.Holder, a.cfg.Name)
			return err
		}); err != nil {
			return fmt.Errorf("node: requeue %s's prompts: %w", prev.Holder, err)
		}
		a.event("requeued %d prompts %s had in flight", len(rq), prev.Holder)
		// The previous term's weights are dead: its engines follow this
		// term from its own base. (Each term deletes its predecessor's, so
		// a run keeps one bucket of deltas.)
		if prev.Token != 0 && prev.Token != token {
			a.deleteTermBucket(ctx, fmt.Sprintf("%s-t%d", a.cfg.Run.Run.ID, prev.Token))
		}
	}
	cfg := a.cfg.Run
	remaining := int64(cfg.Run.Steps) - p.Step
	a.event("resume from step %d version %d (%d steps to go)", p.Step, p.Version, max(remaining, 0))
	if remaining <= 0 {
		a.doneOne.Do(func() { close(a.done) })
		a.event("run complete at step %d", p.Step)
		return nil
	}
	// Each term runs its own pipeline under its own subjects and streams
	// (run.id-t<token>): a dead holder's in-memory buffer may have died
	// with its server, and a deposed holder's late messages must not reach
	// the new term.
	cfg.Run.ID = fmt.Sprintf("%s-t%d", cfg.Run.ID, token)
	cfg.Run.Steps = int(remaining)
	cfg.Run.ReportDir = filepath.Join(cfg.Run.ReportDir, fmt.Sprintf("%s-t%d", a.cfg.Name, token))
	cfg.Bus.NATSURL = a.bus.ClientURL()
	cfg.Run.DataDir = filepath.Join(cfg.Run.DataDir, a.cfg.Name)
	// The term's engines are the engine hosts of the members (this node's
	// included): its weights go through the bus's object store.
	cfg.Publisher.Mode, cfg.Publisher.Store, cfg.Publisher.Transport = config.PublishDelta, config.StoreNATS, config.TransportStore
	// The trainer continues from the weights of the durable step: the
	// checkpoint the progress records is restored, and every new version
	// is checkpointed before its step can be recorded.
	var (
		ck     *termCkpt
		resume bool
		ckOpts Options
		err    error
	)
	if cfg.Trainer.Backend != config.BackendRemote { // a remote worker owns its weights
		resumeDir := filepath.Join(cfg.Run.DataDir, fmt.Sprintf("resume-t%d", token))
		defer os.RemoveAll(resumeDir) // read once, by Start
		if ck, resume, err = startTermCkpt(ctx, a, p, token, resumeDir); err != nil {
			return err
		}
		ckOpts.AfterStep = ck.afterStep
		if resume {
			ckOpts.TrainerCheckpoint = resumeDir
			a.event("resume from checkpoint v%d", p.Version)
		}
	}
	n, err := New(cfg, Options{Logger: a.log, InMemoryBus: a.cfg.InMemoryBus, Remote: a.remoteEngines(),
		RouterListen: a.cfg.RouterListen, RouterAdminToken: a.cfg.RouterAdminToken,
		TrainerCheckpoint: ckOpts.TrainerCheckpoint, AfterStep: ckOpts.AfterStep})
	if err != nil {
		return err
	}
	// The mirror listens before the controller admits the first prompts.
	mirror, err := a.mirrorLedger(n, token)
	if err != nil {
		return err
	}
	defer mirror.stop()
	// The term's health: the streams it depends on are probed (and the
	// lease's and buffer's leaders kept on this node's server); no step or
	// a failing stream beyond its bound is an event and ends the term
	// (ErrTermStalled) — from the start, so a term stuck while it starts
	// (a stream that cannot be created) is not a silent stall either.
	th, err := a.startTermHealth(ctx, cfg.Run.ID)
	if err != nil {
		return err
	}
	defer th.stop()
	mirror.mu.Lock()
	mirror.health = th
	mirror.mu.Unlock()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	if err := a.startWatched(ctx, n, th, tick.C); err != nil {
		return err
	}
	defer n.Stop()
	if err := th.register(n.reg, a.stepdowns); err != nil {
		return err
	}
	saved := 0
	save := func(ctx context.Context) error {
		steps := n.steps()
		for ; saved < len(steps); saved++ {
			s := steps[saved]
			prompts, ok := mirror.promptsOf(s.GroupIDs)
			if !ok {
				// The step's consumed events are still on their way to
				// the mirror: record the step at a later tick.
				return nil
			}
			np := ledger.Progress{Step: p.Step + s.Step, Version: p.Version + s.Version, Token: token, Holder: a.cfg.Name, Prompts: prompts}
			if a.beforeSave != nil {
				a.beforeSave(ctx, np.Step)
			}
			if ck != nil {
				loc, err := ck.location(s.Version)
				if err != nil {
					return err
				}
				np.Checkpoint = loc
			}
			// A server of a clustered bus that died may have led the
			// progress bucket: retry while the survivors elect a leader
			// (a fenced write is final: a newer term claimed the progress).
			if err := retry(ctx, 30*time.Second, func() error {
				err := a.led.SaveProgress(ctx, np)
				if errors.Is(err, lease.ErrFenced) {
					return backoff.Permanent(err)
				}
				return err
			}); err != nil {
				return fmt.Errorf("node: save progress: %w", err)
			}
			if ck != nil {
				ck.recorded(s.Version, np.Checkpoint)
			}
			th.stepDone(time.Now())
			// The step is durable: its prompts are trained (if this node
			// dies first, the next holder does this from np.Prompts).
			if err := a.markTrained(ctx, np.Step, prompts); err != nil {
				return fmt.Errorf("node: mark step %d's prompts trained: %w", np.Step, err)
			}
			// Reward and the engines-vs-trainer logprob mismatch tell an
			// operator the run learns and the engines serve the weights
			// they claim (a term restored wrongly shows a large mismatch).
			a.event("step %d version %d reward %.3f mismatch %.4f", np.Step, np.Version, s.RewardMean, s.Stats.Mismatch)
		}
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			// A step the trainer finished while the pipeline stopped is
			// trained: record it (fenced: refused if a newer holder has
			// claimed the progress meanwhile).
			n.Stop()
			mirror.stop()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return save(sctx)
		case <-tick.C:
		}
		if err := save(ctx); err != nil {
			return err
		}
		if err := a.checkTerm(th, time.Now()); err != nil {
			return err
		}
		steps := n.steps()
		if n.tr != nil {
			if err := n.tr.Err(); err != nil {
				return err
			}
		}
		if len(steps) >= cfg.Run.Steps {
			// Stop the pipeline first: its rollouts' running episodes are
			// aborted and requeued, and the mirror records that.
			n.Stop()
			mirror.stop()
			// steps may have grown since save: record every step.
			if err := save(ctx); err != nil {
				return err
			}
			a.event("run complete at step %d", p.Step+int64(saved))
			// Groups admitted but not trained when the run ended (waiting
			// in the buffer or for a rollout, here or on a deposed
			// holder whose last events landed late) go back to the pool.
			if err := a.requeueAll(ctx); err != nil {
				return fmt.Errorf("node: requeue at the end: %w", err)
			}
			if err := a.reportLedger(ctx, mirror); err != nil {
				return err
			}
			a.doneOne.Do(func() { close(a.done) })
			<-ctx.Done()
			return nil
		}
	}
}

// startWatched starts the term's pipeline while its watch ticks: a start
// that outlasts the watch's bounds is cancelled and ends the term.
func (a *Agent) startWatched(ctx context.Context, n *Node, th *termHealth, tick <-chan time.Time) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	started := make(chan error, 1)
	go func() { started <- n.Start(sctx) }()
	for {
		select {
		case err := <-started:
			th.running.Store(err == nil)
			return err
		case <-tick:
			if err := a.checkTerm(th, time.Now()); err != nil {
				cancel()
				<-started // Start stops what it started when it fails
				return err
			}
		}
	}
}

// Stop leaves gossip, stops the pipeline (resigning the lease), gives the
// name up and closes the bus. Idempotent.
func (a *Agent) Stop() {
	a.stopOne.Do(func() {
		a.stopping.Store(true)
		if a.cancel != nil {
			a.cancel()
		}
		a.wg.Wait()
		if a.ms != nil {
			a.announceLeaving()
			_ = a.ms.Leave(time.Second)
		}
		if a.leavingSub != nil {
			_ = a.leavingSub.Unsubscribe()
		}
		if a.rollouts != nil {
			a.rollouts.stop()
		}
		if a.host != nil {
			a.host.stop()
		}
		if a.guard != nil {
			a.guard.Close()
		}
		if a.bus != nil {
			_ = a.bus.Close()
		}
	})
}

// waitJetStream waits until JetStream answers: a clustered embedded server
// needs its routes up and a meta leader elected (a few seconds after the
// majority of servers started) before any bucket can be created.
func waitJetStream(ctx context.Context, bus *natsbus.Bus, within time.Duration) error {
	js, err := jetstream.New(bus.Conn())
	if err != nil {
		return fmt.Errorf("node: jetstream: %w", err)
	}
	deadline := time.Now().Add(within)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.AccountInfo(cctx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("node: jetstream not ready after %s (a clustered bus needs a majority of the --routes servers up): %w", within, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// permanentErr stops retry at once.
type permanentErr struct{ error }

func (p permanentErr) Unwrap() error { return p.error }

// backoff names the helper that marks an error as final for retry.
var backoff = struct{ Permanent func(error) error }{Permanent: func(err error) error { return permanentErr{err} }}

// retry calls f every 500ms until it succeeds, returns a permanent error,
// ctx ends or within passed; it returns f's last error.
func retry(ctx context.Context, within time.Duration, f func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := f()
		if err == nil {
			return nil
		}
		var p permanentErr
		if errors.As(err, &p) {
			return p.error
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// ensureKV creates the KV bucket name (history 1, ttl, replicas, file
// storage) unless it exists.
func ensureKV(ctx context.Context, bus *natsbus.Bus, name string, ttl time.Duration, replicas int) error {
	js, err := jetstream.New(bus.Conn())
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = js.CreateKeyValue(cctx, jetstream.KeyValueConfig{Bucket: name, Description: "asyncrl node-name claims",
		History: 1, TTL: ttl, Storage: jetstream.FileStorage, Replicas: replicas})
	if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return nil
	}
	return err
}

// mirror copies one term's prompt ledger from the bus into the durable
// ledger, validated transition by transition.
type mirror struct {
	sub      transport.Subscription
	mu       sync.Mutex
	illegal  int // transitions the durable ledger refused (a double train would land here)
	recorded int
	last     time.Time // when the last event was recorded
	once     sync.Once
	conn     interface{ FlushTimeout(time.Duration) error }
	// groups maps the term's groups to the prompt attempts they run (from
	// the consumed events), so a trained step can name its prompts.
	groups map[string]ledger.PromptAttempt
	// health hears every write's outcome once the term's watch runs.
	health *termHealth
}

// promptsOf names the prompt attempts of groups; ok is false while some
// group's consumed event has not been mirrored yet.
func (m *mirror) promptsOf(groups []string) (out []ledger.PromptAttempt, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, g := range groups {
		pa, found := m.groups[g]
		if !found {
			return nil, false
		}
		out = append(out, pa)
	}
	return out, true
}

// stop waits until the ledger events still on the wire have been
// recorded (no event for quiet, at most 5s), then unsubscribes.
func (m *mirror) stop() {
	const quiet = 300 * time.Millisecond
	m.once.Do(func() {
		_ = m.conn.FlushTimeout(2 * time.Second)
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			m.mu.Lock()
			idle := time.Since(m.last)
			m.mu.Unlock()
			if idle >= quiet {
				break
			}
			time.Sleep(quiet / 4)
		}
		_ = m.sub.Unsubscribe()
	})
}

// mirrorLedger subscribes to the pipeline's PromptLedger subject. Prompt
// ids are qualified by the term ("t<token>/"): each term draws its prompts
// afresh, so the ids of two terms must not collide; the sender is this
// node, so a standby can requeue what it held in flight (RequeueNode).
func (a *Agent) mirrorLedger(n *Node, token uint64) (*mirror, error) {
	m := &mirror{conn: a.bus.Conn(), groups: map[string]ledger.PromptAttempt{}}
	prefix := fmt.Sprintf("t%d/", token)
	sub, err := a.bus.Subscribe(n.subj.ledger, func(msg *transport.Msg) {
		v, err := messages.Decode(msg.Data)
		if err != nil {
			return
		}
		ev, ok := v.(messages.PromptLedger)
		if !ok {
			return
		}
		ev.PromptID = prefix + ev.PromptID
		ev.Sender = a.cfg.Name
		if ev.State == messages.LedgerTrained {
			// A prompt counts as trained only together with the durable
			// step that trained it: the holder marks a step's prompts after
			// its fenced SaveProgress (markTrained), and the next holder
			// does so for the last durable step. The controller's own
			// trained event comes before that write, so a holder deposed in
			// between would leave trained marks for a step no durable
			// weights hold, and the next term would train as many prompts
			// again (issue 20: "trained 100" for 24 steps × 4).
			return
		}
		if ev.State == messages.LedgerConsumed {
			m.mu.Lock()
			m.groups[ev.GroupID] = ledger.PromptAttempt{PromptID: ev.PromptID, GroupID: ev.GroupID, Attempt: ev.Attempt}
			m.mu.Unlock()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		err = a.recordEvent(ctx, ev)
		m.mu.Lock()
		defer m.mu.Unlock()
		m.recorded++
		m.last = time.Now()
		if errors.Is(err, ledger.ErrIllegalTransition) {
			m.illegal++
			a.log.Error().Err(err).Str("prompt", ev.PromptID).Msg("durable ledger refused a transition")
			err = nil // the ledger answered: a refusal is not ill health
		} else if err != nil {
			a.log.Warn().Err(err).Str("prompt", ev.PromptID).Msg("durable ledger write failed")
		}
		if m.health != nil {
			m.health.ledgerWrite(err)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("node: ledger mirror: %w", err)
	}
	m.sub = sub
	if err := a.bus.Conn().Flush(); err != nil { // the server knows the subscription
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("node: ledger mirror: %w", err)
	}
	return m, nil
}

// LedgerCounts counts the durable ledger's prompts by state.
type LedgerCounts struct {
	Trained, Filtered, Requeued, InFlight int
	// Refused counts the transitions this node's mirror saw refused
	// (illegal: e.g. a second train).
	Refused int
}

// reportLedger writes the durable ledger's final counts as an event.
func (a *Agent) reportLedger(ctx context.Context, m *mirror) error {
	all, err := a.led.Entries(ctx)
	if err != nil {
		return err
	}
	var c LedgerCounts
	for _, e := range all {
		switch e.State {
		case messages.LedgerTrained:
			c.Trained++
		case messages.LedgerFiltered:
			c.Filtered++
		case messages.LedgerRequeued:
			c.Requeued++
		case messages.LedgerConsumed:
			c.InFlight++
		}
	}
	m.mu.Lock()
	c.Refused = m.illegal
	m.mu.Unlock()
	a.event("ledger prompts %d trained %d filtered %d requeued %d in_flight %d refused %d",
		len(all), c.Trained, c.Filtered, c.Requeued, c.InFlight, c.Refused)
	a.mu.Lock()
	a.final = &c
	a.mu.Unlock()
	return nil
}

// FinalLedger returns the durable ledger's counts as this node saw them
// when it finished the run; ok is false unless this node finished it.
func (a *Agent) FinalLedger() (c LedgerCounts, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.final == nil {
		return LedgerCounts{}, false
	}
	return *a.final, true
}

// requeueAll requeues every prompt still in flight, whoever consumed it.
func (a *Agent) requeueAll(ctx context.Context) error {
	all, err := a.led.Entries(ctx)
	if err != nil {
		return err
	}
	senders := map[string]bool{}
	for _, e := range all {
		if e.State == messages.LedgerConsumed {
			senders[e.Sender] = true
		}
	}
	for s := range senders {
		if _, err := a.led.RequeueNode(ctx, s, a.cfg.Name); err != nil {
			return err
		}
	}
	return nil
}

// recordEvent records ev in the durable ledger. The pipeline's ledger
// events can arrive out of order when a publish was retried (a clustered
// stream electing a leader after a node died): a prompt's next attempt
// consumed before the previous attempt's requeue, and that requeue late.
// Both are repaired here, since the controller consumes attempt a+1 only
// after it requeued attempt a; anything else the ledger refuses stays an
// error (a second train among them).
func (a *Agent) recordEvent(ctx context.Context, ev messages.PromptLedger) error {
	// Transient failures (a stream electing its leader after a node died)
	// are retried for a while; the handler runs events one at a time, so
	// the order is kept.
	var err error
	for range 20 {
		if err = a.recordOnce(ctx, ev); err == nil || errors.Is(err, ledger.ErrIllegalTransition) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(500 * time.Millisecond):
		}
	}
	return err
}

func (a *Agent) recordOnce(ctx context.Context, ev messages.PromptLedger) error {
	_, _, err := a.led.Record(ctx, ev)
	if err == nil || !errors.Is(err, ledger.ErrIllegalTransition) {
		return err
	}
	cur, ok, gerr := a.led.Get(ctx, ev.PromptID)
	if gerr != nil {
		return gerr // transient: retried
	}
	if !ok {
		return err
	}
	switch {
	case ev.State == messages.LedgerRequeued && ev.Attempt < cur.Attempt:
		return nil // superseded: the repair below recorded it
	case ev.State == messages.LedgerConsumed && cur.State == messages.LedgerConsumed && cur.Attempt < ev.Attempt:
		rq := cur
		rq.State, rq.Sender = messages.LedgerRequeued, a.cfg.Name
		if _, _, err := a.led.Record(ctx, rq); err != nil {
			return err
		}
		_, _, err = a.led.Record(ctx, ev)
		return err
	}
	return err
}

// watchDone closes Done on every trainer node (standbys too) once the
// durable progress reaches run.steps, so --exit-when-done ends them all.
func (a *Agent) watchDone(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.done:
			return
		case <-tick.C:
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		p, ok, err := a.led.Progress(cctx)
		cancel()
		// The holder closes Done itself after its final ledger report;
		// a standby sees the progress complete and no holder.
		if err == nil && ok && p.Step >= int64(a.cfg.Run.Run.Steps) && p.Holder != a.cfg.Name {
			a.doneOne.Do(func() { close(a.done) })
			a.event("run complete at step %d (trained by %s)", p.Step, p.Holder)
			return
		}
	}
}

// remoteEngines is how a term's pipeline finds its engines: the members'
// engine hosts, read from gossip; every change to its router's table is
// an event ("routing add http://…", "routing remove http://…").
func (a *Agent) remoteEngines() *RemoteEngines {
	ready := map[string]bool{} // OnChange runs under the watcher's lock
	return &RemoteEngines{BaseRun: a.cfg.Run.Run.ID, Node: a.cfg.Name, Members: a.ms.Members, Replicas: a.cfg.Replicas, Event: a.event,
		OnChange: func(ch discovery.Change) {
			// Health flips with every version an engine still has to
			// load: print only the first time an engine becomes routable.
			switch {
			case ch.Op == discovery.OpAdd || ch.Op == discovery.OpRemove:
				delete(ready, ch.URL)
				a.event("routing %s", ch)
			case ch.Op == discovery.OpHealth && ch.Healthy && !ready[ch.URL]:
				ready[ch.URL] = true
				a.event("routing ready %s", ch.URL)
			}
		}}
}

// markTrained records step's prompt attempts as trained in the durable
// ledger: the only writer of trained marks (the mirror drops the
// controller's), called once the step is durable. Marking twice (the
// holder and, after its death, the next holder) is a duplicate.
func (a *Agent) markTrained(ctx context.Context, step int64, prompts []ledger.PromptAttempt) error {
	for _, pa := range prompts {
		err := a.recordEvent(ctx, messages.PromptLedger{Header: messages.Header{Sender: a.cfg.Name}, PromptID: pa.PromptID,
			GroupID: pa.GroupID, State: messages.LedgerTrained, Step: step, Attempt: pa.Attempt})
		if err != nil {
			return fmt.Errorf("prompt %s: %w", pa.PromptID, err)
		}
	}
	return nil
}

// leavingSubject carries NodeLeaving: asyncrl.<run>.control.leaving.
func leavingSubject(run string) string {
	return transport.MustSubject(run, transport.TopicControl, "leaving")
}

// onLeaving drops a member that leaves cleanly from the quorum's voters
// (whether its gossip leave has arrived yet or not).
func (a *Agent) onLeaving(m *transport.Msg) {
	nl, err := messages.DecodeAs[messages.NodeLeaving](m.Data)
	if err != nil || nl.RunID != a.cfg.Run.Run.ID || nl.Sender == "" || nl.Sender == a.cfg.Name {
		return
	}
	a.mu.Lock()
	a.quorum.Left(nl.Sender)
	a.mu.Unlock()
}

// announceLeaving tells the others this node leaves for good, before it
// leaves gossip.
func (a *Agent) announceLeaving() {
	data, err := messages.Encode(messages.NodeLeaving{Header: messages.Header{RunID: a.cfg.Run.Run.ID, Sender: a.cfg.Name}})
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := a.bus.Publish(ctx, leavingSubject(a.cfg.Run.Run.ID), data); err == nil {
		_ = a.bus.Conn().FlushTimeout(time.Second)
	}
}

// deleteTermBucket removes a finished term's weight bucket; a failure is
// only logged (the bucket is garbage, not state).
func (a *Agent) deleteTermBucket(ctx context.Context, term string) {
	js, err := jetstream.New(a.bus.Conn())
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = js.DeleteObjectStore(cctx, "asyncrl-weights-"+term)
		cancel()
	}
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) && !errors.Is(err, jetstream.ErrBucketNotFound) {
		a.log.Warn().Err(err).Str("term", term).Msg("node: previous term's weight bucket not deleted")
	}
}
