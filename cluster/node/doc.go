// Package node is the pipeline: every role of a run in one process.
// `asyncrl run` is one pipeline (Run); a cluster term is one too
// (cluster/agent).
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
// routable; a publish that failed is tried again (publisher.attempts)
// before the run ends on it. A stopped engine leaves the tracker. A
// remote trainer's checkpoints (WeightsPublished, file://) take the same
// path; the engines' acks are what the worker waits for, and a repeated
// announcement of a version every engine failed publishes it again
// (publisher.retry_backoff apart, doubling). publisher.mode full swaps
// the serving copy into each engine from memory instead (a version
// some engine took is published; the others' errors are logged).
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
// # Cluster terms
//
// The lease agent behind `asyncrl node` (cluster/agent) runs each term of
// the trainer lease as one pipeline under the run id <run>-t<token>,
// through the face in face.go and remote.go only: New, Start, Steps (the
// trained steps its core is fed), Err (the trainer's failure), Register
// (the term's metrics), Stop. With Options.Remote the pipeline starts no
// engines: its TermEngines (the term's core) decides which members'
// engines it registers and what each is sent, through the EngineSet it
// is handed at Start; every TermEngines method says which goroutine calls
// it and none may block. Options.AfterStep, AfterExecStep,
// TrainerCheckpoint, ExecCheckpoint, OnStartPhase and BeforeAnnounce are
// the term's checkpoints, start phases and hold points.
//
// # Swapped parts
//
// A benchmark runs the same pipeline with parts of its own (options.go,
// swap.go): Options.Stepper (a trainer that trains nothing, a publisher
// that publishes nothing), Source (a prompt source that ends), Engines
// (engines on a hash model), ControllerMailbox, and wrappers of the
// router's upstream transport and handler, the rollout client, generator
// and trajectory-buffer stream. Unset, nothing changes. The readers
// (RolloutStats, ControllerCore, Gatherer, SlowConsumerDrops, BusOutMsgs,
// EngineDrivers, GroupStreamHeld) are for after Start, from any goroutine.
package node
