package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/cluster"
	"github.com/asyncrl/asyncrl/cluster/enginehost"
	"github.com/asyncrl/asyncrl/cluster/ledger"
	"github.com/asyncrl/asyncrl/cluster/placement"
	"github.com/asyncrl/asyncrl/cluster/rankhost"
	"github.com/asyncrl/asyncrl/cluster/rollouthost"
	"github.com/asyncrl/asyncrl/cluster/term"
	"github.com/asyncrl/asyncrl/cluster/termwatch"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
	"github.com/asyncrl/asyncrl/wiring"
)

// ErrConfig wraps problems with an Config (bad roles, addresses).
var ErrConfig = errors.New("node: invalid agent configuration")

// Config configures one cluster node (asyncrl node).
type Config struct {
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
	// BusSecurity is the bus's credentials and TLS (wiring.BusSecurityFrom
	// of the config's bus section, flags applied): the client's user or
	// credentials, the routes' mutual TLS and authentication (required
	// with a ClusterListen off loopback), and whether the embedded server
	// admits only this node's role user (cluster/access).
	BusSecurity wiring.BusSecurity
	// Gossip is the memberlist bind address (host:port; port 0 picks one).
	Gossip string
	// GossipKeys encrypt and authenticate gossip (cluster.LoadGossipKeys
	// of --gossip-key-file or cluster.gossip_key_file; the first is the
	// primary). Required when Gossip is off loopback.
	GossipKeys [][]byte
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
	// for this long (default 30s; an election takes 4–9 s). StartAfter:
	// the same when the term has not started this long after it claimed
	// the lease — its streams, its base weights, an engine that loaded
	// version 0 (default 5m; keep it above the slowest start).
	StallAfter, UnhealthyAfter, StartAfter time.Duration
	// Run is the run configuration (the same file on every node).
	Run config.Config
	// Logger receives the node's logs.
	Logger zerolog.Logger
	// Events, when set, receives one line per cluster event ("node n1:
	// lease trainer acquired token 7"); operators and tests read it.
	Events io.Writer
	// EventsJSON, when set, receives the same events as JSON, one
	// EventRecord a line: the term core's typed (kind, token, step,
	// version, count, node, reason), the agent's other lines as "text".
	EventsJSON io.Writer
	// InMemoryBus keeps the embedded server's JetStream files in a
	// temporary directory (tests).
	InMemoryBus bool
	// RouterListen is where the router of this node's terms listens
	// (host:port, a specific host: rollout nodes on other machines dial
	// it); default 127.0.0.1 on a free port. Off loopback
	// RouterAdminToken is required.
	RouterListen, RouterAdminToken string
	// TinkerListen overrides tinker.listen for the tinker role (host:port;
	// off loopback TinkerAPIKey is required). TinkerAPIKey, when set, is
	// required in X-API-Key on the Tinker API (asyncrl node
	// --tinker-api-key-file).
	TinkerListen, TinkerAPIKey string
	// HoldFile (tests; asyncrl node --hold-file): while this file names a
	// hold point (HoldSave, HoldMarks, HoldCheckpointWrite, HoldPublish),
	// the holder's term stops there and writes a HoldKind event record,
	// so a node-loss test kills a node at that moment; removing the file
	// lets it go on. Empty: no holds.
	HoldFile string
}

// Agent is a running cluster node: bus, name claim, gossip membership and
// the lease of each singleton role it may hold. The holder of the trainer
// lease runs the training pipeline (see the package doc); standbys wait.
type Agent struct {
	cfg Config
	log zerolog.Logger
	bus *natsbus.Bus
	// termBus is the credentials the term's pipeline connects with (this
	// node's own).
	termBus wiring.BusSecurity
	guard   *cluster.NameGuard
	ms      *cluster.Membership
	led     *ledger.Ledger
	// leavingSub receives the other members' NodeLeaving.
	leavingSub transport.Subscription
	// host runs the node's engines (the engine role) for the holder.
	host *enginehost.Host
	// rollouts runs rollout actors for the holder's term (the rollout
	// role), unless this node holds the lease.
	rollouts *rollouthost.Host
	// tinker serves the Tinker API (the tinker role).
	tinker *tinkerRole
	// rankHost starts ranks of other holders' trainer groups
	// (trainer.exec_nodes > 1; rankgroup.go).
	rankHost *rankhost.Host
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	mu      sync.Mutex
	quorum  *cluster.Quorum
	final   *LedgerCounts // set when this node finished the run
	evMu    sync.Mutex
	done    chan struct{} // closed when the run's steps are all trained
	doneOne sync.Once
	// marks are the trained marks still being written (term.go): a
	// durable step's marks must not hold up the term's goroutine.
	marks   sync.WaitGroup
	stopOne sync.Once
	// stopping: Stop has begun; the name claim's loss is then expected.
	stopping atomic.Bool
	// refused counts the transitions the durable ledger refused this node
	// (refuse; the run's count is ledger.Refusals).
	refused atomic.Int64
	// stepdowns counts the terms this node gave up as stalled; registered
	// on each term's registry.
	stepdowns *prometheus.CounterVec
	// beforeSave, when set (tests), runs before each step's progress is
	// saved: a test deposes the holder there.
	beforeSave func(ctx context.Context, step int64)
}

// ParseRoles validates a --roles value; the error lists the known roles.
func ParseRoles(s string) ([]string, error) {
	r, err := placement.ParseRoles(s)
	if err != nil {
		return nil, fmt.Errorf("%w: --roles: %w", ErrConfig, err)
	}
	return r, nil
}

func (c Config) has(role string) bool {
	return slices.Contains(c.Roles, role) || slices.Contains(c.Roles, placement.All)
}

// event writes one line to cfg.Events (a "text" record to cfg.EventsJSON).
func (a *Agent) event(format string, args ...any) {
	a.log.Debug().Str("node", a.cfg.Name).Msgf(format, args...)
	line := fmt.Sprintf(format, args...)
	a.emit(line, EventRecord{Kind: TextKind, Agent: a.cfg.Name, Line: line})
}

// termEvent writes a term core's event: its line to cfg.Events, its
// record to cfg.EventsJSON.
func (a *Agent) termEvent(e term.Event) {
	a.log.Debug().Str("node", a.cfg.Name).Msg(e.String())
	a.emit(e.String(), termRecord(a.cfg.Name, time.Time{}, e))
}

// emit writes line and r (stamped now) to the event writers that are set.
func (a *Agent) emit(line string, r EventRecord) {
	if a.cfg.Events == nil && a.cfg.EventsJSON == nil {
		return
	}
	a.evMu.Lock()
	defer a.evMu.Unlock()
	if a.cfg.Events != nil {
		fmt.Fprintf(a.cfg.Events, "node %s: %s\n", a.cfg.Name, line)
	}
	if a.cfg.EventsJSON != nil {
		r.Time = time.Now()
		if err := writeRecord(a.cfg.EventsJSON, r); err != nil {
			a.log.Warn().Err(err).Str("node", a.cfg.Name).Msg("node: events json")
		}
	}
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

// Stop leaves gossip, stops the pipeline (resigning the lease), gives the
// name up and closes the bus. Idempotent.
func (a *Agent) Stop() {
	a.stopOne.Do(func() {
		a.stopping.Store(true)
		if a.cancel != nil {
			a.cancel()
		}
		a.wg.Wait()
		if a.tinker != nil {
			a.tinker.run.Close()
		}
		if a.ms != nil {
			a.announceLeaving()
			_ = a.ms.Leave(time.Second)
		}
		if a.leavingSub != nil {
			_ = a.leavingSub.Unsubscribe()
		}
		if a.rollouts != nil {
			a.rollouts.Stop()
		}
		if a.rankHost != nil {
			a.rankHost.Close()
		}
		if a.host != nil {
			a.host.Stop()
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

// watchDone closes Done on every trainer node (standbys too) once the
// durable progress reaches run.steps, so --exit-when-done ends them all:
// the progress it polls is the agent core's ProgressObserved, which says
// when the run is complete (RunComplete, Done). The holder closes Done
// itself after its final ledger report; a standby sees the progress
// complete and no holder.
func (a *Agent) watchDone(ctx context.Context) {
	core, err := term.New(a.termConfig())
	if err != nil { // the same configuration every term's core takes
		a.log.Error().Err(err).Msg("node: run-complete watch")
		return
	}
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
		if err != nil || !ok {
			continue
		}
		core.Step(time.Now(), term.ProgressObserved{Progress: toTermProgress(p)})
		if a.applyWatch(core) {
			return
		}
	}
}

// applyWatch applies the run-complete watch's Ready; true once Done.
func (a *Agent) applyWatch(core *term.Core) (done bool) {
	rd := core.Ready()
	core.Advance()
	for _, e := range rd.Events {
		if e.Kind != term.Ignored {
			a.termEvent(e)
		}
	}
	for _, e := range rd.Effects {
		if _, ok := e.(term.Done); ok {
			a.doneOne.Do(func() { close(a.done) })
			done = true
		}
	}
	return done
}

// termConfig is the configuration of the agent's term cores.
func (a *Agent) termConfig() term.Config {
	return term.Config{Node: a.cfg.Name, Run: a.cfg.Run.Run.ID, Steps: int64(a.cfg.Run.Run.Steps),
		Checkpoints: a.cfg.Run.Trainer.Backend != config.BackendRemote,
		Watch:       termwatch.Config{StallAfter: a.cfg.StallAfter, UnhealthyAfter: a.cfg.UnhealthyAfter, StartAfter: a.cfg.StartAfter}}
}

// base is the plan of the agent's (base) run: its run-wide control
// subjects (TermAnnounce, Leaving). normalize validated the id, so the
// error is nil for a started agent (a zero plan's subjects fail to
// publish, they do not panic).
func (a *Agent) base() transport.RunPlan {
	p, _ := transport.Plan(a.cfg.Run.Run.ID)
	return p
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
	if err := a.bus.Publish(ctx, a.base().Leaving, data); err == nil {
		_ = a.bus.Conn().FlushTimeout(time.Second)
	}
}

// deleteTermBucket removes a finished term's weight bucket; a failure is
// only logged (the bucket is garbage, not state).
func (a *Agent) deleteTermBucket(ctx context.Context, term string) {
	js, err := jetstream.New(a.bus.Conn())
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var tp transport.RunPlan
		if tp, err = transport.Plan(term); err == nil {
			err = js.DeleteObjectStore(cctx, tp.WeightsBucket)
		}
		cancel()
	}
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) && !errors.Is(err, jetstream.ErrBucketNotFound) {
		a.log.Warn().Err(err).Str("term", term).Msg("node: previous term's weight bucket not deleted")
	}
}
