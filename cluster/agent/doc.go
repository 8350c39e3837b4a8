// Package agent is the lease agent behind `asyncrl node`.
//
// # Contract
//
// Start runs one member of a multi-node run: the bus (an embedded
// server, clustered with the other nodes' servers through routes, or an
// external NATS cluster), the node's name claim (cluster.ClaimName: a
// duplicate --name fails fast), gossip membership advertising roles, bus
// and route URLs, its engines' URLs and the GPU count, and — for nodes listing the trainer
// role — the trainer lease. The holder claims the durable progress with
// its fencing token (cluster/ledger), requeues the previous holder's
// in-flight prompts, and runs the remaining steps as one pipeline
// (cluster/node, through its face only) on the cluster bus under the run id <run>-t<token>, saving
// the progress after every step and mirroring its prompt ledger into the
// durable ledger (ids t<token>/<prompt>, each transition validated).
// Each new version is checkpointed (model.SaveTrainer: weights, Adam
// moments, step, RNG; cluster/ckpt) into the object store asyncrl-ckpt-<run> before its
// step's progress, which records the location, is saved; the next term
// restores that checkpoint (its serving copy is the term's version 0), so
// training continues from the durable step's weights, and a missing or
// corrupt checkpoint fails the term rather than restart from version 0. A
// standby takes over when the lease expires; a holder that stops or loses
// quorum (cluster.Quorum) stops its pipeline before it gives the lease up.
//
// A term's pipeline (node.Options.Remote) starts no engines of its own: its
// engines are the engine hosts of the members (cluster/enginehost; the engine
// role: engines.count built-in engines advertised in gossip metadata).
// The term's core (termengines.go) decides from membership: the
// pipeline adds each member's engines to its router
// through a discovery watcher and to its publisher at no version, and
// sends each a LoadWeights on asyncrl.<run>.control.engines.<node>; the
// host follows the term (a fresh engine behind each URL, the term's base
// from the object-store bucket asyncrl-weights-<term>, a receiver that
// replays the deltas, load, ack on the term's subjects) and announces
// health and load, so discovery routes to an engine only after it caught
// up. A member that leaves gossip takes its engines out of routing. The
// rollout role (cluster/rollouthost) runs rollout actors for the term on other
// nodes, found through the holder's TermAnnounce; they report their groups
// in flight (RolloutStatus) and the holder reports a dead node's groups
// aborted so the controller requeues them (termcast.go). The router,
// filter, controller, trainer and publisher run in the holder's term.
// Events (one line each: lease acquired, resume, step, member joined and
// left, routing add/ready/remove, engines caught up, groups requeued,
// final ledger counts) go to Config.Events.
package agent
