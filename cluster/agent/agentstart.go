package agent

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/cluster"
	"github.com/asyncrl/asyncrl/cluster/access"
	"github.com/asyncrl/asyncrl/cluster/internal/retry"
	"github.com/asyncrl/asyncrl/cluster/ledger"
	"github.com/asyncrl/asyncrl/cluster/node"
	"github.com/asyncrl/asyncrl/cluster/placement"
	"github.com/asyncrl/asyncrl/cluster/termwatch"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/internal/netx"
	"github.com/asyncrl/asyncrl/transport/natsbus"
	"github.com/asyncrl/asyncrl/wiring"
)

// Start validates cfg, connects to (or hosts) the bus, claims the node
// name, joins gossip and starts contending for the singleton leases of its
// roles. On error everything started is stopped.
func Start(ctx context.Context, cfg Config) (a *Agent, err error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	host, port, err := cfg.gossipAddr()
	if err != nil {
		return nil, err
	}
	a = &Agent{cfg: cfg, log: cfg.Logger, quorum: cluster.NewQuorum(cfg.Name), done: make(chan struct{}),
		stepdowns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "asyncrl_node_term_stepdowns_total",
			Help: "Terms this node gave up because they stalled (reason no_step or dependency)."}, []string{"reason"})}
	defer func() {
		if err != nil {
			a.Stop()
		}
	}()
	if err = a.connectBus(ctx); err != nil {
		return a, err
	}
	if err = a.claimName(ctx); err != nil {
		return a, err
	}
	// A member that says it is leaving cleanly stops voting; gossip alone
	// would count it as failed, and with two members the lower-named one's
	// clean exit would stop the other (cluster.DecideQuorum).
	if a.leavingSub, err = a.bus.Subscribe(a.base().Leaving, a.onLeaving); err != nil {
		return a, fmt.Errorf("node: leave notices: %w", err)
	}
	// The tinker role's server exists before gossip calls onJoin, which
	// reads a.tinker; its engine sync starts once the node has joined.
	if cfg.hasTinker() {
		if err = a.startTinker(ctx); err != nil {
			return a, err
		}
	}
	if err = a.joinGossip(ctx, host, port); err != nil {
		return a, err
	}
	if cfg.has(placement.Rollout) {
		if a.rollouts, err = startRolloutHost(cfg.Run, cfg.Name, a.bus, a.log, a.event); err != nil {
			return a, err
		}
	}
	rctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	if a.tinker != nil {
		a.wg.Go(func() { a.syncTinkerEngines(rctx) })
	}
	if a.cfg.has(placement.Trainer) {
		if err = a.startRankHost(); err != nil {
			return a, err
		}
		if err = a.startTrainer(ctx, rctx); err != nil {
			return a, err
		}
	}
	return a, nil
}

// normalize validates the configuration and fills its defaults.
func (c *Config) normalize() error {
	if _, err := placement.ValidateRoles(c.Roles); err != nil {
		return fmt.Errorf("%w: --roles: %w", ErrConfig, err)
	}
	if c.Name == "" {
		return fmt.Errorf("%w: --name is required", ErrConfig)
	}
	if err := c.Run.Validate(); err != nil {
		return fmt.Errorf("%w: %w", node.ErrConfig, err)
	}
	if c.hasTinker() && c.Run.Tinker.SamplerWeights == config.SamplerVersion {
		return fmt.Errorf("%w: tinker.sampler_weights: version is for a standalone asyncrl tinker serve: a cluster's engines take their versions from the run's publisher; the tinker role needs adapter", ErrConfig)
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if err := c.checkTrainerExec(); err != nil {
		return err
	}
	if err := c.checkRouterListen(); err != nil {
		return err
	}
	if err := c.checkClusterListen(); err != nil {
		return err
	}
	if err := c.checkGossip(); err != nil {
		return err
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 3 * time.Second
	}
	if c.StallAfter == 0 {
		c.StallAfter = termwatch.DefaultConfig().StallAfter
	}
	if c.UnhealthyAfter == 0 {
		c.UnhealthyAfter = termwatch.DefaultConfig().UnhealthyAfter
	}
	if c.StartAfter == 0 {
		c.StartAfter = termwatch.DefaultConfig().StartAfter
	}
	if err := (termwatch.Config{StallAfter: c.StallAfter, UnhealthyAfter: c.UnhealthyAfter, StartAfter: c.StartAfter}).Validate(); err != nil {
		return fmt.Errorf("%w: --stall-after/--unhealthy-after/--start-after: %w", ErrConfig, err)
	}
	return nil
}

// checkTrainerExec refuses a trainer node whose trainer.exec command is
// not on this host: the node would find out only once it won the lease,
// and fail every term it took (waiting longer each time, term.Config
// Recontend) instead of refusing to start.
func (c *Config) checkTrainerExec() error {
	if !c.has(placement.Trainer) || c.Run.Trainer.Backend != config.BackendExec || len(c.Run.Trainer.Exec) == 0 {
		return nil
	}
	if _, err := exec.LookPath(c.Run.Trainer.Exec[0]); err != nil {
		if ee, ok := errors.AsType[*exec.Error](err); ok {
			err = ee.Err // its text names the command again
		}
		return fmt.Errorf("%w: trainer.exec %q: the trainer role runs it on this node: %w", ErrConfig, c.Run.Trainer.Exec[0], err)
	}
	return nil
}

// checkRouterListen refuses a --router-listen that other nodes cannot
// dial (no host, or a wildcard).
func (c *Config) checkRouterListen() error {
	if c.RouterListen == "" {
		return nil
	}
	h, _, err := net.SplitHostPort(c.RouterListen)
	if err != nil {
		return fmt.Errorf("%w: --router-listen %q: %w", ErrConfig, c.RouterListen, err)
	}
	if ip := net.ParseIP(h); h == "" || (ip != nil && ip.IsUnspecified()) {
		return fmt.Errorf("%w: --router-listen %q: give the address other nodes reach this one at, not a wildcard", ErrConfig, c.RouterListen)
	}
	return nil
}

// checkClusterListen refuses routes off loopback without mutual TLS and
// route authentication, naming the flags (and config keys) that set them.
func (c *Config) checkClusterListen() error {
	if c.ClusterListen == "" || netx.IsLoopback(c.ClusterListen) {
		return nil
	}
	s := c.BusSecurity
	var miss []string
	if s.RouteTLS.CAFile == "" || s.RouteTLS.CertFile == "" || s.RouteTLS.KeyFile == "" {
		miss = append(miss, "--cluster-tls-ca, --cluster-tls-cert and --cluster-tls-key (bus.cluster_tls_*)")
	}
	if s.RouteUser == "" || s.RoutePassword == "" {
		miss = append(miss, "--route-user and --route-password-file (bus.route_user, bus.route_password_file)")
	}
	if len(miss) > 0 {
		return fmt.Errorf("%w: --cluster-listen %s is off loopback: anyone who reaches it would join the NATS cluster; its routes need %s (docs/security.md; asyncrl security mkcerts makes the certificates)",
			ErrConfig, c.ClusterListen, strings.Join(miss, " and "))
	}
	return nil
}

// checkGossip refuses gossip off loopback without a key: memberlist
// would admit anyone who reaches the port as a member (a quorum voter that
// sees the node's endpoints).
func (c *Config) checkGossip() error {
	host, _, err := c.gossipAddr()
	if err != nil || netx.IsLoopback(host) || len(c.GossipKeys) > 0 {
		return err
	}
	return fmt.Errorf("%w: --gossip %s is off loopback: anyone who reaches it would join the cluster's membership and vote in its quorum; it needs a gossip key: --gossip-key-file (cluster.gossip_key_file) (docs/security.md; make one with: head -c 32 /dev/urandom | base64)",
		ErrConfig, c.Gossip)
}

// gossipAddr is the memberlist bind host and port (--gossip; default
// 127.0.0.1 on a free port).
func (c *Config) gossipAddr() (string, int, error) {
	host, port := "127.0.0.1", 0
	if c.Gossip == "" {
		return host, port, nil
	}
	h, p, err := net.SplitHostPort(c.Gossip)
	if err != nil {
		return "", 0, fmt.Errorf("%w: --gossip %q: %w", ErrConfig, c.Gossip, err)
	}
	if port, err = strconv.Atoi(p); err != nil {
		return "", 0, fmt.Errorf("%w: --gossip %q: bad port", ErrConfig, c.Gossip)
	}
	if h != "" {
		host = h
	}
	return host, port, nil
}

// busOptions are the options of the node's bus connection (or embedded
// server).
func (c *Config) busOptions(log zerolog.Logger) (natsbus.Options, error) {
	bopts := natsbus.DefaultOptions()
	bopts.URL, bopts.Name = c.NATSURL, c.Name
	bopts.MaxPayload = c.Run.Bus.MaxPayloadBytes
	bopts.Logger = log.With().Str("component", "bus").Logger()
	if c.NATSURL != "" {
		c.BusSecurity.Apply(&bopts)
		return bopts, nil
	}
	if c.ClusterListen != "" {
		bopts.Cluster = &natsbus.ClusterOptions{Name: "asyncrl-" + c.Run.Run.ID, Listen: c.ClusterListen, Routes: c.Routes}
	}
	c.BusSecurity.Apply(&bopts)
	if c.BusSecurity.RolePermissions {
		// The embedded server admits one user, this node's, allowed only
		// its roles' subjects; its password is made here and never leaves
		// the process.
		pw := rand.Text()
		perms := access.Permissions(c.Roles)
		user := access.UserName(c.Name, c.Roles)
		bopts.Users = []natsbus.User{{Name: user, Password: pw, Permissions: &perms}}
		bopts.Auth = natsbus.Auth{User: user, Password: pw}
	}
	if !c.InMemoryBus {
		bopts.StoreDir = filepath.Join(c.Run.Run.DataDir, "jetstream", c.Name)
		if err := os.MkdirAll(bopts.StoreDir, 0o755); err != nil {
			return bopts, fmt.Errorf("node: jetstream dir: %w", err)
		}
	}
	return bopts, nil
}

// connectBus connects to (or hosts) the bus and waits for JetStream.
func (a *Agent) connectBus(ctx context.Context) (err error) {
	bopts, err := a.cfg.busOptions(a.log)
	if err != nil {
		return err
	}
	if a.bus, err = natsbus.Connect(ctx, bopts); err != nil {
		return fmt.Errorf("node: bus: %w", err)
	}
	// The term's pipeline connects to the same server as this node does.
	a.termBus = wiring.BusSecurity{Auth: bopts.Auth, TLS: bopts.TLS}
	a.event("bus %s", a.bus.ClientURL())
	return waitJetStream(ctx, a.bus, 60*time.Second)
}

// claimName claims the node's name in the replicated names bucket.
func (a *Agent) claimName(ctx context.Context) (err error) {
	host0, _ := os.Hostname()
	inst := fmt.Sprintf("%s:%d:%d", host0, os.Getpid(), time.Now().UnixNano())
	// The names bucket is created here with the cluster's replication
	// (ClaimName would create it with one replica, so the claims of every
	// node would die with the server that hosts it).
	if err = retry.Do(ctx, 30*time.Second, func() error {
		return ensureKV(ctx, a.bus, cluster.NamesBucket, 3*time.Second, a.cfg.Replicas)
	}); err != nil {
		return fmt.Errorf("node: names bucket: %w", err)
	}
	claim := cluster.NameClaim{Name: a.cfg.Name, Instance: inst, Logger: a.log, OnLost: func() {
		if !a.stopping.Load() {
			a.event("name claim lost")
		}
	}}
	// A fresh clustered JetStream can time out creating the names bucket
	// while its servers settle; only ErrNameInUse is an answer.
	return retry.Do(ctx, 30*time.Second, func() error {
		a.guard, err = cluster.ClaimName(ctx, a.bus.Conn(), claim)
		if errors.Is(err, cluster.ErrNameInUse) {
			return retry.Permanent(err)
		}
		return err
	})
}

// joinGossip starts the node's engines (the engine role) and joins gossip
// with the metadata that advertises them.
func (a *Agent) joinGossip(ctx context.Context, host string, port int) (err error) {
	cfg := a.cfg
	meta := cluster.NodeMeta{Roles: cfg.Roles, GPUs: cfg.GPUs, Endpoints: map[string]string{"nats": a.bus.ClientURL()}}
	if cfg.has(placement.Engine) {
		// The engines listen before the node joins gossip: their URLs are
		// in the metadata the other members learn it from.
		if a.host, err = startEngineHost(cfg.Run, cfg.Name, a.bus, a.log, a.event); err != nil {
			return err
		}
		maps.Copy(meta.Endpoints, a.host.Endpoints())
		a.event("engines %s", strings.Join(slices.Sorted(maps.Values(a.host.Endpoints())), " "))
	}
	if u := a.bus.ClusterURL(); u != "" {
		meta.Endpoints["route"] = u
	}
	mc := cluster.DefaultMembershipConfig(cfg.Name)
	mc.BindAddr, mc.BindPort, mc.Join, mc.Meta, mc.Keys = host, port, cfg.Join, meta, cfg.GossipKeys
	a.quorum.Joined(cfg.Name)
	mc.OnJoin, mc.OnLeave = a.onJoin, a.onLeave
	// The member named by --join may still be starting (three terminals
	// started at once): retry for a while.
	if err = retry.Do(ctx, 30*time.Second, func() error {
		a.ms, err = cluster.JoinCluster(mc, a.log)
		return err
	}); err != nil {
		return err
	}
	a.event("gossip %s", a.ms.Addr())
	return nil
}

// onJoin counts a member that joined gossip as a voter.
func (a *Agent) onJoin(m cluster.Member) {
	a.mu.Lock()
	a.quorum.Joined(m.Name)
	a.mu.Unlock()
	a.kickTinker()
	a.event("member joined %s roles %s", m.Name, strings.Join(m.Meta.Roles, ","))
}

// onLeave counts a member that left gossip (without a leave notice) as
// failed.
func (a *Agent) onLeave(m cluster.Member) {
	if m.Name == a.cfg.Name {
		return // this node's own leave, at Stop
	}
	a.mu.Lock()
	a.quorum.Failed(m.Name)
	a.mu.Unlock()
	a.kickTinker()
	a.event("member left %s", m.Name)
}

// startTrainer opens the durable ledger and starts contending for the
// trainer lease and watching for the run's end.
func (a *Agent) startTrainer(ctx, rctx context.Context) (err error) {
	lcfg := ledger.DefaultConfig(a.cfg.Run.Run.ID)
	lcfg.Replicas, lcfg.Logger = a.cfg.Replicas, a.log
	if err = retry.Do(ctx, 30*time.Second, func() error {
		a.led, err = ledger.Open(ctx, a.bus.Conn(), lcfg)
		return err
	}); err != nil {
		return err
	}
	a.wg.Go(func() { a.contend(rctx) })
	a.wg.Go(func() { a.watchDone(rctx) })
	return nil
}
