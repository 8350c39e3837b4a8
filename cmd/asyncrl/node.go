package main

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/asyncrl/asyncrl/cluster"
	"github.com/asyncrl/asyncrl/cluster/agent"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/gpu"
	"github.com/asyncrl/asyncrl/internal/netx"
	"github.com/asyncrl/asyncrl/wiring"
)

// nodeFlags are asyncrl node's flags.
type nodeFlags struct {
	config         string
	name           string
	roles          string
	nats           string
	join           []string
	gossip         string
	gossipKeyFile  string
	clusterListen  string
	routes         []string
	replicas       int
	leaseTTL       time.Duration
	stallAfter     time.Duration
	unhealthyAfter time.Duration
	startAfter     time.Duration
	steps          int
	exitWhenDone   bool
	routerListen   string
	routerToken    string
	eventsJSON     string
	tinkerListen   string
	tinkerKeyFile  string
	holdFile       string
	bus            busSecurityFlags
}

// busSecurityFlags override the config's bus credentials and TLS (each
// flag its bus.* key); secrets are read from files only.
type busSecurityFlags struct {
	user, passwordFile, tokenFile, creds, nkey string
	ca, cert, key                              string
	clusterCA, clusterCert, clusterKey         string
	routeUser, routePasswordFile               string
	rolePermissions                            bool
}

func (b *busSecurityFlags) add(fs *pflag.FlagSet) {
	b.addClient(fs)
	fs.StringVar(&b.clusterCA, "cluster-tls-ca", "", "PEM CA `FILE` the route certificates of every member verify against (bus.cluster_tls_ca; required with --cluster-listen off loopback)")
	fs.StringVar(&b.clusterCert, "cluster-tls-cert", "", "PEM certificate `FILE` of this member's routes (bus.cluster_tls_cert)")
	fs.StringVar(&b.clusterKey, "cluster-tls-key", "", "PEM key `FILE` of --cluster-tls-cert (bus.cluster_tls_key)")
	fs.StringVar(&b.routeUser, "route-user", "", "`USER` every member authenticates its routes with (bus.route_user; required with --cluster-listen off loopback)")
	fs.StringVar(&b.routePasswordFile, "route-password-file", "", "`FILE` holding the route password, the same on every member (bus.route_password_file)")
	fs.BoolVar(&b.rolePermissions, "role-permissions", false, "the embedded server admits only this node's role user, allowed only its roles' subjects (bus.role_permissions; docs/security.md)")
}

// apply sets the flags given on the command line over c's bus section.
func (b *busSecurityFlags) apply(c *config.BusConfig, changed func(string) bool) {
	for _, f := range []struct {
		flag string
		dst  *string
		v    string
	}{{"nats-user", &c.User, b.user}, {"nats-password-file", &c.PasswordFile, b.passwordFile}, {"nats-token-file", &c.TokenFile, b.tokenFile},
		{"nats-creds", &c.CredsFile, b.creds}, {"nats-nkey", &c.NKeySeedFile, b.nkey}, {"nats-tls-ca", &c.TLSCA, b.ca},
		{"nats-tls-cert", &c.TLSCert, b.cert}, {"nats-tls-key", &c.TLSKey, b.key}, {"cluster-tls-ca", &c.ClusterTLSCA, b.clusterCA},
		{"cluster-tls-cert", &c.ClusterTLSCert, b.clusterCert}, {"cluster-tls-key", &c.ClusterTLSKey, b.clusterKey},
		{"route-user", &c.RouteUser, b.routeUser}, {"route-password-file", &c.RoutePasswordFile, b.routePasswordFile}} {
		if changed(f.flag) {
			*f.dst = f.v
		}
	}
	if changed("role-permissions") {
		c.RolePermissions = b.rolePermissions
	}
}

// newNodeCmd: asyncrl node — one member of a multi-node run: bus (embedded
// and clustered, or external), name claim, gossip membership, and the
// leases of its singleton roles; the trainer lease's holder trains.
func newNodeCmd(g *globals) *cobra.Command {
	var f nodeFlags
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Run this machine as a cluster node (membership, role placement, failover)",
		Long: "Run one node of a multi-node run. The node connects to NATS (--nats) or hosts an\n" +
			"embedded nats-server that joins the other nodes' servers as one NATS cluster\n" +
			"(--cluster-listen, --routes), claims its --name (a second live node with the same name\n" +
			"is refused), joins gossip membership (--gossip, --join) advertising its roles and GPU\n" +
			"count, and contends for the trainer lease when it lists the trainer role: the holder\n" +
			"trains from the last durable step and its checkpoint, standbys take over when it dies.\n" +
			"A node with the engine role serves engines.count built-in engines to whichever node\n" +
			"holds the trainer lease: they catch up to the current weights (through the bus's\n" +
			"object store) before they get traffic, and leave routing when the node dies. A run\n" +
			"needs at least one engine node. Cluster events are printed on stdout, one line each.\n" +
			"See docs/cluster.md.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd, g) },
	}
	fs := cmd.Flags()
	fs.StringVar(&f.config, "config", "", "run configuration `FILE` (YAML; the same file on every node; default: built-in defaults)")
	fs.StringVar(&f.name, "name", "", "this node's unique `NAME` (required)")
	fs.StringVar(&f.roles, "roles", "all", "comma-separated `ROLES`: all, bus, engine, router, rollout, filter, trainer, publisher, controller, tinker (engine: host engines; trainer: contend for the trainer lease, whose holder runs router, rollout, filter, controller, trainer and publisher; tinker: serve the Tinker API on the cluster's engines, not part of all)")
	fs.StringVar(&f.nats, "nats", "", "`URL`s of an existing NATS cluster (comma-separated); empty hosts an embedded nats-server")
	fs.StringSliceVar(&f.join, "join", nil, "gossip `HOST:PORT` of an existing member (repeat or comma-separate; none for the first node)")
	fs.StringVar(&f.gossip, "gossip", "127.0.0.1:7946", "gossip (memberlist) listen `ADDR` host:port")
	fs.StringVar(&f.gossipKeyFile, "gossip-key-file", "", "`FILE` holding the gossip encryption key(s) (cluster.gossip_key_file; required when --gossip is off loopback; docs/security.md)")
	fs.StringVar(&f.clusterListen, "cluster-listen", "", "embedded nats-server route listen `ADDR` (host:port) to form a NATS cluster with the other nodes")
	fs.StringSliceVar(&f.routes, "routes", nil, "every member's route `URL` (nats-route://host:port, comma-separated, this node's included)")
	fs.IntVar(&f.replicas, "replicas", 1, "JetStream replicas of every stream the run keeps: leases, name claims, durable ledger, checkpoints, each term's trajectory buffer and weights (3 on a three-server cluster)")
	fs.DurationVar(&f.leaseTTL, "lease-ttl", 3*time.Second, "singleton lease TTL: a standby takes over about this long after the holder died")
	fs.DurationVar(&f.stallAfter, "stall-after", 10*time.Minute, "the trainer holder gives its term up when no step completed for this long (a clean term resumes from the durable step); keep it above the slowest step")
	fs.DurationVar(&f.unhealthyAfter, "unhealthy-after", 30*time.Second, "the trainer holder gives its term up when a stream it depends on failed every probe for this long")
	fs.DurationVar(&f.startAfter, "start-after", 5*time.Minute, "the trainer holder gives its term up when it has not started this long after it took the lease (its streams, base weights, an engine at version 0); keep it above the slowest start")
	fs.IntVar(&f.steps, "steps", 0, "trainer steps of the whole run (overrides run.steps)")
	fs.StringVar(&f.routerListen, "router-listen", "", "`ADDR` (host:port) the router of this node's training terms listens on, reachable by rollout nodes on other machines (default 127.0.0.1, a free port; off loopback --router-admin-token is required)")
	fs.StringVar(&f.routerToken, "router-admin-token", "", "bearer `TOKEN` for the term router's /admin/ API (required with a non-loopback --router-listen)")
	fs.StringVar(&f.eventsJSON, "events-json", "", "also write the cluster events to `FILE` as JSON, one object a line (kind, token, step, version, count, node, reason, time, line; see docs/cluster.md)")
	fs.StringVar(&f.tinkerListen, "tinker-listen", "", "`ADDR` (host:port) of the tinker role's Tinker API (default tinker.listen; off loopback --tinker-api-key-file is required)")
	fs.StringVar(&f.tinkerKeyFile, "tinker-api-key-file", "", "`FILE` holding the X-API-Key the tinker role's API requires")
	f.bus.add(fs)
	fs.BoolVar(&f.exitWhenDone, "exit-when-done", false, "exit once the durable progress shows run.steps steps (default: keep serving until interrupted)")
	// Tests only (make soak-cluster, make test-cluster): the kill moments.
	fs.StringVar(&f.holdFile, "hold-file", "", "while `FILE` names a hold point (save, marks, checkpoint-write, publish), the trainer holder's term stops there and writes a hold event (kill tests)")
	_ = fs.MarkHidden("hold-file")
	return cmd
}

// run is asyncrl node's body: check the flags, load the config, start the
// agent and serve until interrupted (or, with --exit-when-done, until the
// run is done).
func (f *nodeFlags) run(cmd *cobra.Command, g *globals) error {
	roles, err := f.check()
	if err != nil {
		return err
	}
	cfg, err := f.loadConfig(cmd)
	if err != nil {
		return fail("asyncrl node: %v", err)
	}
	log, err := g.logger(cmd, cfg.Log)
	if err != nil {
		return fail("asyncrl node: %v", err)
	}
	sec, err := wiring.BusSecurityFrom(cfg.Bus)
	if err != nil {
		return fail("asyncrl node: %v", err)
	}
	if f.nats != "" && sec.RolePermissions {
		return fail("asyncrl node: --role-permissions configures the embedded server; with --nats connect as a role user (--nats-user, --nats-password-file) your server defines (docs/security.md)")
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	inv := gpu.Probe()
	fmt.Fprintf(g.stdout, "node %s: %s\n", f.name, gpuLine(inv))
	evj, closeEvj, err := openEventsJSON(f.eventsJSON)
	if err != nil {
		return fail("asyncrl node: %v", err)
	}
	defer closeEvj()
	tinkerKey, gossipKeys, err := f.readKeys(roles, cfg)
	if err != nil {
		return err
	}
	a, err := agent.Start(ctx, agent.Config{Name: f.name, Roles: roles, NATSURL: f.nats,
		ClusterListen: f.clusterListen, Routes: f.routes, BusSecurity: sec, Gossip: f.gossip, GossipKeys: gossipKeys, Join: f.join,
		GPUs: len(inv.Devices), Replicas: f.replicas, LeaseTTL: f.leaseTTL,
		StallAfter: f.stallAfter, UnhealthyAfter: f.unhealthyAfter, StartAfter: f.startAfter, Run: cfg, Logger: log,
		Events: g.stdout, RouterListen: f.routerListen, RouterAdminToken: f.routerToken,
		EventsJSON: evj, TinkerListen: f.tinkerListen, TinkerAPIKey: tinkerKey, HoldFile: f.holdFile})
	if err != nil {
		return fail("asyncrl node: %v", err)
	}
	defer a.Stop()
	select {
	case <-ctx.Done():
	case <-doneIf(a.Done(), f.exitWhenDone):
	}
	return nil
}

// check parses --roles and refuses flags that do not go together (before
// anything is read or started).
func (f *nodeFlags) check() ([]string, error) {
	roles, err := agent.ParseRoles(f.roles)
	if err != nil {
		return nil, fail("asyncrl node: %v", err)
	}
	if f.name == "" {
		return nil, fail("asyncrl node: --name is required (every node needs its own)")
	}
	if f.nats != "" && f.clusterListen != "" {
		return nil, fail("asyncrl node: --cluster-listen configures the embedded server; it cannot be used with --nats")
	}
	if f.clusterListen != "" && len(f.routes) == 0 {
		return nil, fail("asyncrl node: --cluster-listen needs --routes (every member's route URL, this node's too)")
	}
	return roles, nil
}

// loadConfig loads --config with the flags given on the command line
// (--steps, the bus's) over it.
func (f *nodeFlags) loadConfig(cmd *cobra.Command) (config.Config, error) {
	changed := cmd.Flags().Changed
	return loadConfig(f.config, func(c *config.Config) {
		if changed("steps") {
			c.Run.Steps = f.steps
		}
		f.bus.apply(&c.Bus, changed)
	})
}

// readKeys reads the tinker role's API key, refusing none for a tinker
// role off loopback, then the gossip keys.
func (f *nodeFlags) readKeys(roles []string, cfg config.Config) (tinkerKey string, gossipKeys [][]byte, err error) {
	tinkerKey, err = readTinkerKey(f.tinkerKeyFile)
	if err != nil {
		return "", nil, fail("asyncrl node: %v", err)
	}
	if tl := cmp.Or(f.tinkerListen, cfg.Tinker.Listen); slices.Contains(roles, "tinker") && tinkerKey == "" && !netx.IsLoopback(tl) {
		return "", nil, fail("asyncrl node: the tinker role listens on %s, off loopback: give its API key with --tinker-api-key-file", tl)
	}
	gossipKeys, err = readGossipKeys(cmp.Or(f.gossipKeyFile, cfg.Cluster.GossipKeyFile))
	if err != nil {
		return "", nil, fail("asyncrl node: %v", err)
	}
	return tinkerKey, gossipKeys, nil
}

// readGossipKeys reads --gossip-key-file / cluster.gossip_key_file (nil
// when unset: plaintext gossip, which StartAgent allows on loopback only).
func readGossipKeys(path string) ([][]byte, error) {
	if path == "" {
		return nil, nil
	}
	return cluster.LoadGossipKeys(path)
}

// readTinkerKey reads --tinker-api-key-file ("" when unset).
func readTinkerKey(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--tinker-api-key-file: %w", err)
	}
	k := strings.TrimSpace(string(b))
	if k == "" {
		return "", fmt.Errorf("--tinker-api-key-file %s is empty", path)
	}
	return k, nil
}

// openEventsJSON creates path for --events-json (nil writer when empty).
func openEventsJSON(path string) (io.Writer, func(), error) {
	if path == "" {
		return nil, func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, fmt.Errorf("--events-json: %w", err)
	}
	return f, func() { _ = f.Close() }, nil
}

// doneIf returns ch when on, else a channel that never closes.
func doneIf(ch <-chan struct{}, on bool) <-chan struct{} {
	if on {
		return ch
	}
	return nil
}

// gpuLine says what the node has: "gpu: 8 devices (driver 550.54)" or,
// on a machine without a GPU or driver, "gpu: none (<why>)" — never an error.
func gpuLine(inv gpu.Inventory) string {
	if !inv.Available {
		return "gpu: none (" + inv.Reason + ")"
	}
	return fmt.Sprintf("gpu: %d devices (driver %s)", len(inv.Devices), inv.Driver)
}
