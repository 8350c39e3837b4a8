package access

import (
	"slices"
	"strings"

	"github.com/asyncrl/asyncrl/cluster/placement"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// anyRun is the run's plan with '*' for the run: the permission patterns
// of a subject of every run.
var anyRun = transport.AnyRunPlan()

// Kind is a permission set: every role maps to one.
type Kind string

// Permission sets.
const (
	// Pipeline: the trainer lease's holder runs router, rollout, filter,
	// controller, trainer and publisher; it creates and deletes the run's
	// streams, writes leases and the durable ledger, and publishes
	// everything the pipeline sends. The roles trainer, router, filter,
	// controller, publisher and all get it.
	Pipeline Kind = "pipeline"
	// EngineHost: an engine node serves engines to the holder's term; it
	// reports health, load and version acks and reads the term's weights.
	EngineHost Kind = "engine"
	// RolloutHost: a rollout node runs rollout actors for the holder's
	// term; it publishes finished groups and aborted episodes, its status,
	// and consumes prompts.
	RolloutHost Kind = "rollout"
	// BusOnly: a node that only hosts a server (and claims its name).
	BusOnly Kind = "bus"
	// TinkerAPI: a node serving the Tinker API keeps its training futures
	// in the asyncrl_tinker_futures KV bucket (its keys under its name);
	// it samples on engines over HTTP, never on the bus.
	TinkerAPI Kind = "tinker"
)

// KindOf is the permission set of one role.
func KindOf(role string) Kind {
	switch role {
	case placement.Engine:
		return EngineHost
	case placement.Rollout:
		return RolloutHost
	case placement.Bus:
		return BusOnly
	case placement.Tinker:
		return TinkerAPI
	default: // all, trainer, router, filter, controller, publisher
		return Pipeline
	}
}

// Row is one permission set of the table.
type Row struct {
	Kind      Kind
	Roles     []string // the roles that get it
	Publish   []string // allowed publish subjects
	Deny      []string // publish subjects denied though an allow matches
	Subscribe []string // allowed subscriptions
	Why       string
}

// every node: its name claim (KV), its leave notice, the JetStream API
// calls that read (jsRead), flow-control answers of ordered consumers.
var common = append(slices.Clone(jsRead),
	"$JS.FC.>",
	"$KV.asyncrl_names.>",
	anyRun.Leaving,
)

// jsRead is the JetStream API a node outside the pipeline calls: account,
// stream and message reads (KV gets, object-store metadata), consumers
// (KV watches, object-store reads, the rollouts' prompt consumers: an
// ordered consumer creates and deletes itself), and the one stream every
// node creates, the name-claims bucket (KV_asyncrl_names; whoever starts
// first makes it). Stream creation, update and deletion of anything else
// is not listed, so the server refuses it: the run's streams (ledger,
// trajectory buffer, prompts, weight buckets, leases) belong to the
// pipeline holder. A NATS stream name is one subject token, so these are
// exact names or '*' over every stream, never a name prefix.
var jsRead = []string{
	"$JS.API.INFO",
	"$JS.API.STREAM.INFO.*",
	"$JS.API.STREAM.NAMES",
	"$JS.API.STREAM.LIST",
	"$JS.API.STREAM.MSG.GET.*",
	"$JS.API.DIRECT.GET.>",
	"$JS.API.CONSUMER.>",
	"$JS.API.STREAM.CREATE.KV_asyncrl_names",
}

// the JetStream API calls that destroy or reshape streams or the
// cluster: only the pipeline holder (which owns the run's streams and
// buckets) may make them. jsRead does not allow them either; the deny
// keeps them refused should an allow pattern ever grow to cover them.
// Deleting a consumer stays allowed (jsRead): an object-store read's
// ordered consumer deletes itself when done, and NATS subjects cannot tell
// its stream (OBJ_<bucket>, one token) from another by prefix.
var destructive = []string{
	"$JS.API.STREAM.DELETE.>",
	"$JS.API.STREAM.PURGE.>",
	"$JS.API.STREAM.MSG.DELETE.>",
	"$JS.API.META.>",
	"$JS.API.SERVER.>",
	"$JS.API.ACCOUNT.PURGE.>",
}

// every node subscribes to the run's subjects and its own inboxes
// (request replies, JetStream consumers' deliveries).
var subscribeAll = []string{transport.RootWildcard, "_INBOX.>"}

// Table is the role → subjects table (docs/security.md prints it).
func Table() []Row {
	return []Row{
		{Kind: Pipeline, Roles: []string{placement.All, placement.Trainer, placement.Router, placement.Filter, placement.Controller, placement.Publisher},
			Publish:   []string{transport.RootWildcard, "$JS.>", "$KV.>", "$O.>", "_INBOX.>"},
			Subscribe: []string{">"},
			Why:       "the lease holder runs the whole pipeline: every run subject, the run's streams (it creates and deletes them), leases, ledger, checkpoints and weight buckets"},
		{Kind: EngineHost, Roles: []string{placement.Engine},
			Publish: append(slices.Clone(common),
				anyRun.EngineKindAll(transport.EngineHealth), anyRun.EngineKindAll(transport.EngineLoad), anyRun.EngineKindAll(transport.EngineAck)),
			Deny: destructive, Subscribe: subscribeAll,
			Why: "engine reports (health, load, version acks); weights read through the JetStream API (no stream created but the name claims); LoadWeights answered as a reply"},
		{Kind: RolloutHost, Roles: []string{placement.Rollout},
			Publish: append(slices.Clone(common),
				anyRun.Trajectories, anyRun.Aborted, anyRun.RolloutStatusAll, "$JS.ACK.>"),
			Deny: destructive, Subscribe: subscribeAll,
			Why: "finished groups and aborted episodes, rollout status, prompt acks; it binds the term's trajectory buffer, which the holder made"},
		{Kind: BusOnly, Roles: []string{placement.Bus},
			Publish: slices.Clone(common), Deny: destructive, Subscribe: subscribeAll,
			Why: "its name claim and leave notice only"},
		{Kind: TinkerAPI, Roles: []string{placement.Tinker},
			Publish: append(slices.Clone(common), "$KV.asyncrl_tinker_futures.>",
				"$JS.API.STREAM.CREATE.KV_asyncrl_tinker_futures", "$JS.API.STREAM.UPDATE.KV_asyncrl_tinker_futures"),
			Deny: destructive, Subscribe: subscribeAll,
			Why: "training futures in the asyncrl_tinker_futures bucket (it creates that one); sampling goes to the engines over HTTP"},
	}
}

// Permissions are the union of roles' permission sets: a node with the
// engine and rollout roles may publish what either may. Any pipeline role
// gives the pipeline's (which subsumes the rest).
func Permissions(roles []string) natsbus.Permissions {
	rows := Table()
	var p natsbus.Permissions
	kinds := map[Kind]bool{}
	for _, r := range roles {
		kinds[KindOf(r)] = true
	}
	if kinds[Pipeline] {
		kinds = map[Kind]bool{Pipeline: true}
	}
	first := true
	for _, row := range rows {
		if !kinds[row.Kind] {
			continue
		}
		p.Publish.Allow = union(p.Publish.Allow, row.Publish)
		p.Subscribe.Allow = union(p.Subscribe.Allow, row.Subscribe)
		if first {
			p.Publish.Deny = slices.Clone(row.Deny)
			first = false
		} else {
			// A deny holds only when every set has it.
			p.Publish.Deny = slices.DeleteFunc(p.Publish.Deny, func(d string) bool { return !slices.Contains(row.Deny, d) })
		}
	}
	if len(p.Publish.Deny) == 0 {
		p.Publish.Deny = nil
	}
	p.AllowResponses = true
	return p
}

// UserName is the bus user of a node: "<kinds>-<node>", e.g.
// "engine-n2" (names only; the password is the operator's secret).
func UserName(node string, roles []string) string {
	var ks []string
	for _, r := range roles {
		if k := string(KindOf(r)); !slices.Contains(ks, k) {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return strings.Join(ks, "+") + "-" + node
}

func union(a, b []string) []string {
	for _, s := range b {
		if !slices.Contains(a, s) {
			a = append(a, s)
		}
	}
	return a
}
