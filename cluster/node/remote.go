package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/asyncrl/asyncrl/actors/publisher/tracker"
	rpolicy "github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/cluster/discovery"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/weights/store"
)

// natsObjectScheme prefixes a JetStream object store bucket in a
// LoadWeights URI.
const natsObjectScheme = "nats-os://"

// termBasePrefix is where a term's base checkpoint (its version 0) lies
// in the term's weight bucket, next to the deltas.
const termBasePrefix = "base/"

// RemoteEngines makes the pipeline serve from engines on other nodes
// (cluster mode): it starts no engines of its own, publishes its weights
// through a JetStream object store bucket every node can read, and takes
// its engines from the cluster agent's term (Term).
type RemoteEngines struct {
	// BaseRun is the run id the engine hosts listen under (the cluster
	// run's id; the pipeline's own run.id is the term's <run>-t<token>).
	BaseRun string
	// Replicas of the term's weight bucket (default 1).
	Replicas int
	// Term decides the engines (required): the agent's term core.
	Term TermEngines
}

// TermEngines is the cluster agent's side of a term's remote engines: its
// term core (cluster/term) decides which members' engines the pipeline
// registers (AddEngines, RemoveEngines: EngineSet.Add, Remove), what
// LoadWeights each is sent and when it is sent again (SendLoadWeights:
// EngineSet.Send); the pipeline makes none of these decisions. It tells
// the term what it needs to decide through these methods.
//
// Every method is called on a goroutine of the pipeline that other work
// waits for (Start, the trainer's publish, a bus handler, the discovery
// watcher): none may block or wait for the term's loop. An implementation
// hands the input to its loop (an inbox push) and returns.
type TermEngines interface {
	// Attach hands over the term's engine set, once, on Start's
	// goroutine, before Start waits for an engine to load version 0 (the
	// term's loop must apply its AddEngines and SendLoadWeights meanwhile).
	Attach(*EngineSet)
	// RouterListening says where the term's router listens, once, on
	// Start's goroutine right after Attach: the term announces it
	// (TermAnnounce) to the engine and rollout hosts.
	RouterListening(url string)
	// Target is a LoadWeights target the publisher wants engine at (the
	// core's EngineTarget). Called wherever the publisher shell dispatches
	// a command: the trainer's goroutine as it publishes a version, the
	// bus handler of the engines' acks, and the term's own loop inside
	// EngineSet.Add (a new engine's first target).
	Target(engine string, version int64)
	// RoutingChanged receives every change discovery makes to the
	// router's table, on the discovery watcher's goroutine with the
	// watcher's lock held: it must not call into the EngineSet.
	RoutingChanged(discovery.Change)
	// Event receives one line per notable event of the engines ("no
	// engine to publish to: waiting…"), from Start's or the trainer's
	// goroutine.
	Event(format string, args ...any)
}

// EngineSet is the pipeline's side of its remote engines, the shell of
// the term core's engine decisions: the discovery watcher that keeps the
// router's table, the publisher registrations and the LoadWeights sent to
// the hosts.
type EngineSet struct {
	cfg RemoteEngines
	n   *Node
	// ws is the pipeline's weight sync, held here rather than read from
	// n.wsync: Start assigns n.wsync again (or nil, on an error) after
	// run started, which would race with run's reads.
	ws      *weightSync
	bucket  string
	watcher *discovery.Watcher
	// engines counts the remote engines registered with the publisher;
	// commands the LoadWeights sent (resends included).
	engines  prometheus.Gauge
	commands prometheus.Counter

	mu      sync.Mutex
	members map[string]map[string]string // node -> engine name -> url
	nodeOf  map[string]string            // engine name -> node
}

// uploadBase puts the term's base checkpoint (every file of dir) under
// termBasePrefix in st, for the engine hosts to start from.
func uploadBase(ctx context.Context, st store.Store, dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var files []store.FileObject
	for _, e := range ents {
		if !e.IsDir() {
			files = append(files, store.FileObject{Key: termBasePrefix + e.Name(), Path: filepath.Join(dir, e.Name())})
		}
	}
	if err := store.PutFiles(ctx, st, files, 0); err != nil {
		return fmt.Errorf("node: upload the term's base: %w", err)
	}
	return nil
}

// startRemote starts the discovery watcher on the pipeline's (the term's)
// engine subjects and hands the remote set to the term core's shell,
// which registers the members' engines as the core decides
// (termengines.go).
func (n *Node) startRemote(ctx context.Context, bucket string) error {
	rc := *n.opts.Remote
	if rc.Term == nil {
		return fmt.Errorf("%w: remote engines without the term core that decides them (RemoteEngines.Term)", ErrConfig)
	}
	wc := discovery.DefaultWatcherConfig(n.cfg.Run.ID)
	wc.Logger, wc.OnChange = n.opts.Logger, rc.Term.RoutingChanged
	w, err := discovery.NewWatcher(n.bus, n.router, wc)
	if err != nil {
		return err
	}
	r := &EngineSet{cfg: rc, n: n, ws: n.wsync, bucket: bucket, watcher: w, members: map[string]map[string]string{},
		nodeOf: map[string]string{},
		engines: prometheus.NewGauge(prometheus.GaugeOpts{Name: "asyncrl_node_remote_engines",
			Help: "Engines of other nodes (engine hosts) registered with this term's publisher and router."}),
		commands: prometheus.NewCounter(prometheus.CounterOpts{Name: "asyncrl_node_load_weights_sent_total",
			Help: "LoadWeights commands this term sent to engine hosts, resends included."})}
	for _, c := range []prometheus.Collector{r.engines, r.commands} {
		if err := n.reg.Register(c); err != nil {
			_ = w.Close()
			return fmt.Errorf("node: remote engine metrics: %w", err)
		}
	}
	n.remote = r
	n.wsync.remote = r // before the first Join: its command goes through r
	rctx, cancel := context.WithCancel(context.Background())
	n.remoteStop = cancel
	n.remoteWG.Go(func() { w.Run(rctx) })
	rc.Term.Attach(r) // the term core registers the engines (Add, Remove)
	// Rollout actors on other nodes join the term once they hear of it.
	rc.Term.RouterListening(n.routerURL)
	return nil
}

// waitServed blocks until some engine serves version (after every engine
// left while it was being published).
func (r *EngineSet) waitServed(ctx context.Context, version int64) error {
	r.cfg.Term.Event("no engine serves version %d: waiting for a node with the engine role", version)
	for {
		for _, st := range r.ws.shell.Engines() {
			if st.Serving >= version {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node: publisher: version %d: %w", version, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitEngines blocks while the publisher has no engine registered (the
// only engine node died and has not come back): a version published now
// would fail, and with it the trainer's step and the term.
func (r *EngineSet) waitEngines(ctx context.Context) error {
	said := false
	for len(r.ws.shell.Engines()) == 0 {
		if !said {
			r.cfg.Term.Event("no engine to publish to: waiting for a node with the engine role")
			said = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// joined adds a member's engines to discovery (unhealthy until they
// announce themselves and ack a version ≥ the minimum) and to the
// publisher, holding no version of this term: the publisher's command
// brings them to the current version from the term's base.
func (r *EngineSet) joined(node string, eps map[string]string) {
	r.mu.Lock()
	r.members[node] = eps
	for name := range eps {
		r.nodeOf[name] = node
	}
	r.mu.Unlock()
	urls := map[string]string{}
	for name, u := range eps {
		urls[strings.TrimPrefix(name, node+"-")] = u
	}
	r.watcher.MemberJoined(node, urls)
	// A new replica holds no version of this term until it acks one: the
	// router's own health probe may call it healthy before discovery hears
	// from it, and version 0 would pass the gate at the term's start while
	// the engine still serves the seed's weights.
	noVersion := make([]rpolicy.Change, 0, len(urls))
	for _, u := range urls {
		noVersion = append(noVersion, rpolicy.SetVersion{URL: u, Version: tracker.NoVersion})
	}
	if err := r.n.router.Apply(noVersion...); err != nil {
		r.n.opts.Logger.Warn().Err(err).Str("node", node).Msg("node: remote engines' version not reset in the router")
	}
	names := make([]string, 0, len(eps))
	for name := range eps {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		cmd, err := r.ws.shell.Join(name, eps[name], tracker.NoVersion)
		if err != nil {
			r.n.opts.Logger.Warn().Err(err).Str("engine", name).Msg("node: remote engine not registered")
			continue
		}
		r.ws.Dispatch(cmd)
	}
}

// dispatch hands the term core engine name's target (the core's
// SendLoadWeights sends it); false when name is not a remote engine.
func (r *EngineSet) dispatch(name string, target int64) bool {
	r.mu.Lock()
	_, ok := r.nodeOf[name]
	r.mu.Unlock()
	if ok {
		r.cfg.Term.Target(name, target)
	}
	return ok
}

// Add applies the term core's AddEngines: node's engines (name → URL),
// new or advertised anew (a restarted node's hold nothing yet). Called by
// the term's loop; each new engine's first target comes back through
// TermEngines.Target before Add returns.
func (r *EngineSet) Add(node string, eps map[string]string) {
	r.joined(node, eps)
	r.count()
}

// Remove applies the term core's RemoveEngines: node's engines names
// leave routing and the publisher; a node left with none leaves
// discovery. Called by the term's loop.
func (r *EngineSet) Remove(node string, names []string) {
	r.mu.Lock()
	cur, known := r.members[node]
	for _, name := range names {
		delete(cur, name)
		delete(r.nodeOf, name)
	}
	empty := known && len(cur) == 0
	if empty {
		delete(r.members, node)
	}
	r.mu.Unlock()
	if empty {
		r.watcher.MemberLeft(node)
	}
	for _, name := range names {
		r.ws.shell.Leave(name)
	}
	r.count()
}

// Serving lists what each registered engine serves (the publisher's
// acks): the term's loop feeds the core what changed (EngineServing).
func (r *EngineSet) Serving() map[string]int64 {
	out := map[string]int64{}
	for _, st := range r.ws.shell.Engines() {
		out[st.Engine] = st.Serving
	}
	return out
}

// Send applies the term core's SendLoadWeights: a LoadWeights for engine
// name at target on node's control subject, from the term's bucket. A
// failed send is logged; the core sends again on its next resend tick.
// Called by the term's loop; the publish waits at most 2 s.
func (r *EngineSet) Send(node, name string, target int64) {
	base, err := transport.Plan(r.cfg.BaseRun)
	var subj string
	if err == nil {
		subj, err = base.EngineControl(node)
	}
	if err != nil {
		return
	}
	data, err := messages.Encode(messages.LoadWeights{
		Header: messages.Header{RunID: r.n.cfg.Run.ID, Sender: "publisher-0", Version: target},
		Engine: name, Format: messages.WeightsDelta, URI: natsObjectScheme + r.bucket})
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = r.n.bus.Publish(ctx, subj, data)
		cancel()
	}
	if err != nil {
		r.n.opts.Logger.Warn().Err(err).Str("engine", name).Int64("version", target).Msg("node: LoadWeights not sent")
		return
	}
	r.commands.Inc()
}

// count sets the engines gauge from the registrations.
func (r *EngineSet) count() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.engines.Set(float64(len(r.nodeOf)))
}

// waitRoutable blocks until discovery finds some remote engine routable:
// it announced itself healthy and acked a version of this term (the
// rollouts would otherwise fail against an empty router).
func (r *EngineSet) waitRoutable(ctx context.Context) error {
	said := false
	for {
		if len(r.watcher.Routable()) > 0 {
			return nil
		}
		if !said {
			r.cfg.Term.Event("waiting for an engine (a node with the engine role) to load version 0")
			said = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (r *EngineSet) close() {
	if r.watcher != nil {
		_ = r.watcher.Close()
	}
}
