// Package node is the node agent: it starts a set of roles in one process.
// `asyncrl run` is one node with every role.
//
// # Contract
//
// New validates the configuration (every problem at once, from package
// config), resolves the task and the optional JSONL dataset (a malformed
// line names the file and line). Start brings up, in order: the bus (an
// embedded NATS server on 127.0.0.1 with JetStream, or bus.nats_url), the
// durable ledger stream, the built-in engines on 127.0.0.1:0 serving the
// policy's BF16 copy at version 0, the router proxy on 127.0.0.1:0, the
// trainer with the weight publisher, the sampling actor, the rollout
// actors (enough for W groups of n trajectories) and last the controller,
// whose start admits the first groups. All actor traffic goes over the
// bus; only turns use HTTP.
//
// # Weights
//
// With publisher.mode delta (the default) every trainer step writes the
// new BF16 serving checkpoint, encodes it as a SkyRL delta against the
// previous version into publisher.store (a local dir
// <sync_dir>/<run.id>, the bus's JetStream object store, or S3; emptied at
// start, since a run starts from version 0) and hands the version to the
// publisher shell (actors/publisher over the version Tracker). One
// agent per engine drives a weights/receiver with its own mutable copy
// under <data_dir>/receivers/<run.id>/<engine>: fetch and apply while the
// engine serves, then pause (trainer.pause_mode), LoadWeights through
// wiring.LoadPolicy, resume, and an EngineVersionAck on the bus. The shell
// tells the router each acked version and raises the router's minimum
// version once some engine serves it, so no request reaches an engine
// below the minimum; the trainer's Publish returns once the version is
// routable. A stopped engine leaves the tracker. A remote trainer's
// checkpoints (WeightsPublished, file://) take the same path; the
// engines' acks are what the worker waits for. publisher.mode full swaps
// the serving copy into each engine from memory instead.
//
// Wait returns when the trainer finished run.steps steps, the context
// ended (Ctrl-C: interrupted), training failed, or dynamic sampling
// sampled filter.max_sample_batches generation batches without filling a
// step (the controller's SamplingExhausted: ErrStalled). Stop stops the
// rollout actors first — their running episodes are reported aborted, so
// the controller requeues them — then waits until every group reported on
// the bus is on the controller's books, lets the engines' receivers
// finish the versions already published, and stops the rest. Summary (after
// Stop) fills report.Summary; Run does all of it and writes the report.
//
// The Ledger is the bus-side view of every group (consumed, reported,
// kept/filtered, accepted, trained/filtered/requeued) used for the
// accounting: trajectories_lost counts trajectories neither finished nor
// reported aborted, plus those of reported groups that never reached the
// controller's books.
//
// # Cluster agent (asyncrl node)
//
// StartAgent runs one member of a multi-node run: the bus (an embedded
// server, clustered with the other nodes' servers through routes, or an
// external NATS cluster), the node's name claim (cluster.ClaimName: a
// duplicate --name fails fast), gossip membership advertising roles, bus
// and route URLs, its engines' URLs and the GPU count, and — for nodes listing the trainer
// role — the trainer lease. The holder claims the durable progress with
// its fencing token (cluster/ledger), requeues the previous holder's
// in-flight prompts, and runs the remaining steps as one pipeline of the
// Node above on the cluster bus under the run id <run>-t<token>, saving
// the progress after every step and mirroring its prompt ledger into the
// durable ledger (ids t<token>/<prompt>, each transition validated).
// Each new version is checkpointed (policy.SaveTrainer: weights, Adam
// moments, step, RNG; cluster/ckpt) into the object store asyncrl-ckpt-<run> before its
// step's progress, which records the location, is saved; the next term
// restores that checkpoint (its serving copy is the term's version 0), so
// training continues from the durable step's weights, and a missing or
// corrupt checkpoint fails the term rather than restart from version 0. A
// standby takes over when the lease expires; a holder that stops or loses
// quorum (cluster.Quorum) stops its pipeline before it gives the lease up.
//
// A term's pipeline (Options.Remote) starts no engines of its own: its
// engines are the engine hosts of the members (enginehost.go; the engine
// role: engines.count built-in engines advertised in gossip metadata).
// The term polls membership, adds each member's engines to its router
// through a discovery watcher and to its publisher at no version, and
// sends each a LoadWeights on asyncrl.<run>.control.engines.<node>; the
// host follows the term (a fresh engine behind each URL, the term's base
// from the object-store bucket asyncrl-weights-<term>, a receiver that
// replays the deltas, load, ack on the term's subjects) and announces
// health and load, so discovery routes to an engine only after it caught
// up. A member that leaves gossip takes its engines out of routing. The
// rollout role (rollouthost.go) runs rollout actors for the term on other
// nodes, found through the holder's TermAnnounce; they report their groups
// in flight (RolloutStatus) and the holder reports a dead node's groups
// aborted so the controller requeues them (termcast.go). The router,
// filter, controller, trainer and publisher run in the holder's term.
// Events (one line each: lease acquired, resume, step, member joined and
// left, routing add/ready/remove, engines caught up, groups requeued,
// final ledger counts) go to AgentConfig.Events.
package node
