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
// trainer, the sampling actor, the rollout actors (enough for W groups of
// n trajectories) and last the controller, whose start admits the first
// groups. All actor traffic goes over the bus; only turns use HTTP.
//
// Wait returns when the trainer finished run.steps steps, the context
// ended (Ctrl-C: interrupted), training failed, or the filter dropped
// filter.max_sample_batches·B groups in a row (ErrStalled). Stop stops the
// rollout actors first — their running episodes are reported aborted, so
// the controller requeues them — then waits until every group reported on
// the bus is on the controller's books, and stops the rest. Summary (after
// Stop) fills report.Summary; Run does all of it and writes the report.
//
// The Ledger is the bus-side view of every group (consumed, reported,
// kept/filtered, accepted, trained/filtered/requeued) used for the
// accounting: trajectories_lost counts trajectories neither finished nor
// reported aborted, plus those of reported groups that never reached the
// controller's books.
package node
