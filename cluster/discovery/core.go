package discovery

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/messages"
)

// ErrBadConfig is returned for an invalid Config.
var ErrBadConfig = errors.New("discovery: bad config")

// Config configures the discovery core.
type Config struct {
	// StaleAfter: an engine with no announcement for this long is
	// unhealthy (default 3s; engines announce load every ~500ms).
	StaleAfter time.Duration
	// ForgetAfter: an engine with no announcement for this long leaves the
	// table even though its node is alive; 0 keeps it (unhealthy) until its
	// node leaves. Must be 0 or > StaleAfter. Default 0.
	ForgetAfter time.Duration
	// MinVersion is the initial minimum version an engine must have
	// acknowledged to be healthy (MinVersionSet raises it). Default 0.
	MinVersion int64
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config { return Config{StaleAfter: 3 * time.Second} }

// Validate names the field at fault and the allowed values.
func (c Config) Validate() error {
	if c.StaleAfter <= 0 {
		return fmt.Errorf("%w: StaleAfter %s (allowed: > 0)", ErrBadConfig, c.StaleAfter)
	}
	if c.ForgetAfter != 0 && c.ForgetAfter <= c.StaleAfter {
		return fmt.Errorf("%w: ForgetAfter %s (allowed: 0 or > StaleAfter %s)", ErrBadConfig, c.ForgetAfter, c.StaleAfter)
	}
	if c.MinVersion < 0 {
		return fmt.Errorf("%w: MinVersion %d (allowed: >= 0)", ErrBadConfig, c.MinVersion)
	}
	return nil
}

// State is an engine's serving state, as its health announcement says. It
// is the router's own type, so a change carries the value the router sets
// without a parallel enum to keep in step.
type State = policy.State

// Serving states.
const (
	Active   = policy.Active
	Paused   = policy.Paused
	Updating = policy.Updating
	Draining = policy.Draining
)

// Op is one kind of change to the router's table.
type Op int

// Ops.
const (
	// OpAdd adds URL (the router adds it healthy at version 0; the batch
	// always follows with OpHealth and OpVersion).
	OpAdd Op = iota
	// OpRemove removes URL and its sessions.
	OpRemove
	// OpHealth sets URL's health to Healthy.
	OpHealth
	// OpVersion sets the version URL serves.
	OpVersion
	// OpState sets URL's serving state.
	OpState
	// OpMinVersion sets the router's minimum version to Version.
	OpMinVersion
	// OpMetrics records URL's queue length and KV usage at At.
	OpMetrics
)

var opNames = [...]string{"add", "remove", "health", "version", "state", "min_version", "metrics"}

func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Change is one change to the router's table.
type Change struct {
	Op      Op
	URL     string
	Healthy bool
	Version int64
	State   State
	Queue   int
	KVUsage float64
	At      time.Time
}

// String is deterministic, for logs and test comparisons.
func (c Change) String() string {
	switch c.Op {
	case OpAdd, OpRemove:
		return c.Op.String() + " " + c.URL
	case OpHealth:
		return fmt.Sprintf("health %s %v", c.URL, c.Healthy)
	case OpVersion:
		return fmt.Sprintf("version %s %d", c.URL, c.Version)
	case OpState:
		return fmt.Sprintf("state %s %d", c.URL, c.State)
	case OpMinVersion:
		return fmt.Sprintf("min_version %d", c.Version)
	case OpMetrics:
		return fmt.Sprintf("metrics %s q=%d kv=%g", c.URL, c.Queue, c.KVUsage)
	}
	return c.Op.String()
}

// view is what the router has been told about one engine.
type view struct {
	healthy bool
	version int64
	state   State
}

type engine struct {
	url, id, node string
	announced     bool // a health/load/ack arrived since it (re)appeared
	healthy       bool // the last health announcement's verdict
	version       int64
	state         State
	lastSeen      time.Time
	applied       *view // nil: not in the router's table
	// retired: its node advertises a set of engines without it (a
	// restarted process on new ports); removed, then forgotten.
	retired bool
}

// Core is the pure discovery state machine. Every method returns the
// changes to apply, in a deterministic order (by URL).
type Core struct {
	cfg        Config
	minVersion int64
	engines    map[string]*engine
	// nodes: membership's view; a node absent from the map was never
	// mentioned by membership and counts as alive.
	nodes map[string]bool
	// owner maps an advertised engine URL to its node.
	owner map[string]string
}

// New returns an empty core.
func New(cfg Config) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Core{cfg: cfg, minVersion: cfg.MinVersion, engines: map[string]*engine{}, nodes: map[string]bool{}, owner: map[string]string{}}, nil
}

func (c *Core) engine(url string) *engine {
	e, ok := c.engines[url]
	if !ok {
		e = &engine{url: url}
		c.engines[url] = e
	}
	return e
}

func (c *Core) announce(now time.Time, node, id, url string) *engine {
	if url == "" {
		return nil
	}
	e := c.engine(url)
	if o, ok := c.owner[url]; ok {
		node = o // membership's word beats the sender header
	}
	if node != "" {
		e.node = node
	}
	if id != "" {
		e.id = id
	}
	e.announced = true
	e.lastSeen = now
	return e
}

// Health records a health announcement from node (the message's sender).
// The version an engine serves comes only from its acks: an ack is the
// engine's word that it loaded those weights.
func (c *Core) Health(now time.Time, node string, m messages.EngineHealth) []Change {
	if e := c.announce(now, node, m.Engine, m.URL); e != nil {
		e.healthy = m.Healthy
		switch {
		case m.Draining:
			e.state = Draining
		case m.Updating:
			e.state = Updating
		case m.Paused:
			e.state = Paused
		default:
			e.state = Active
		}
	}
	return c.reconcile(now)
}

// Load records a load sample: proof of life, plus the router's metrics.
func (c *Core) Load(now time.Time, node string, m messages.EngineLoad) []Change {
	e := c.announce(now, node, m.Engine, m.URL)
	out := c.reconcile(now)
	if e != nil && e.applied != nil {
		out = append(out, Change{Op: OpMetrics, URL: e.url, Queue: int(m.Running + m.Waiting), KVUsage: m.KVUsage, At: now})
	}
	return out
}

// Ack records that the engine serves m.Version.
func (c *Core) Ack(now time.Time, node string, m messages.EngineVersionAck) []Change {
	if e := c.announce(now, node, m.Engine, m.URL); e != nil {
		e.version = m.Version
	}
	return c.reconcile(now)
}

// SetMinVersion raises the minimum version (a lower one is ignored: the
// minimum never goes back).
func (c *Core) SetMinVersion(now time.Time, v int64) []Change {
	if v <= c.minVersion {
		return c.reconcile(now)
	}
	c.minVersion = v
	return append([]Change{{Op: OpMinVersion, Version: v}}, c.reconcile(now)...)
}

// MinVersion is the current minimum version.
func (c *Core) MinVersion() int64 { return c.minVersion }

// MemberJoined records that node is alive and advertises engineURLs. The
// advertisement is the node's whole set: engines it advertised before and
// not now (a restarted process listening on new ports) leave the table
// for good.
func (c *Core) MemberJoined(now time.Time, node string, engineURLs []string) []Change {
	c.nodes[node] = true
	advertised := map[string]bool{}
	for _, u := range engineURLs {
		if u == "" {
			continue
		}
		advertised[u] = true
		c.owner[u] = node
		e := c.engine(u)
		e.node, e.retired = node, false
	}
	for u, o := range c.owner {
		if o == node && !advertised[u] {
			delete(c.owner, u)
			c.engine(u).retired = true
		}
	}
	return c.reconcile(now)
}

// MemberLeft records that node left or was declared dead. Its engines
// leave the table and forget their versions and announcements.
func (c *Core) MemberLeft(now time.Time, node string) []Change {
	c.nodes[node] = false
	for _, e := range c.engines {
		if e.node == node {
			e.announced, e.healthy, e.version, e.state, e.lastSeen = false, false, 0, Active, time.Time{}
		}
	}
	return c.reconcile(now)
}

// Tick applies the staleness timeouts at now.
func (c *Core) Tick(now time.Time) []Change { return c.reconcile(now) }

func (c *Core) alive(node string) bool {
	alive, known := c.nodes[node]
	return !known || alive
}

// want is the desired view of e at now; nil when it should not be routed.
func (c *Core) want(now time.Time, e *engine) *view {
	if e.retired || !c.alive(e.node) {
		return nil
	}
	_, advertised := c.owner[e.url]
	if !e.announced && !advertised {
		return nil
	}
	silent := now.Sub(e.lastSeen)
	if e.announced && c.cfg.ForgetAfter > 0 && silent >= c.cfg.ForgetAfter {
		return nil
	}
	fresh := e.announced && silent < c.cfg.StaleAfter
	return &view{healthy: fresh && e.healthy && e.version >= c.minVersion, version: e.version, state: e.state}
}

func (c *Core) reconcile(now time.Time) []Change {
	urls := make([]string, 0, len(c.engines))
	for u := range c.engines {
		urls = append(urls, u)
	}
	sort.Strings(urls)
	var out []Change
	for _, u := range urls {
		e := c.engines[u]
		w := c.want(now, e)
		if e.retired && w == nil {
			defer delete(c.engines, u) // after its removal below
		}
		switch {
		case w == nil && e.applied != nil:
			out = append(out, Change{Op: OpRemove, URL: u})
			e.applied = nil
		case w == nil:
		case e.applied == nil:
			out = append(out, Change{Op: OpAdd, URL: u},
				Change{Op: OpVersion, URL: u, Version: w.version},
				Change{Op: OpState, URL: u, State: w.state},
				Change{Op: OpHealth, URL: u, Healthy: w.healthy})
			e.applied = w
		default:
			a := e.applied
			if a.version != w.version {
				out = append(out, Change{Op: OpVersion, URL: u, Version: w.version})
			}
			if a.state != w.state {
				out = append(out, Change{Op: OpState, URL: u, State: w.state})
			}
			if a.healthy != w.healthy {
				out = append(out, Change{Op: OpHealth, URL: u, Healthy: w.healthy})
			}
			e.applied = w
		}
	}
	return out
}

// Routable lists the engines the router should send new traffic to
// (in the table, healthy, active), sorted.
func (c *Core) Routable() []string {
	var out []string
	for u, e := range c.engines {
		if e.applied != nil && e.applied.healthy && e.applied.state == Active {
			out = append(out, u)
		}
	}
	sort.Strings(out)
	return out
}

// Table describes every engine in the router's table, sorted, for logs
// and golden tests: "url node=… v=… healthy=… state=…".
func (c *Core) Table() string {
	var lines []string
	for u, e := range c.engines {
		if a := e.applied; a != nil {
			lines = append(lines, fmt.Sprintf("%s node=%s v=%d healthy=%v state=%d", u, e.node, a.version, a.healthy, a.state))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
