// Command asyncrl is the single asyncrl binary: the control plane for fully
// asynchronous RL post-training.
//
// Subcommands: run (a whole run on one machine), node (a cluster member),
// status (a live view of a running cluster), router, engine, env, worker, weights, sim, chaos, bench, config (print-defaults,
// show, validate) and version. Global flags: --log-level (debug|info|warn|error)
// and --log-format (auto|json|console); commands that read a run
// configuration take --config FILE (see package config).
//
// Exit codes: 0 success; 1 an error (bad flags, bad config, failure, or an
// invariant violated in sim/chaos).
// Command output goes to stdout, logs and errors to stderr.
//
// main stays thin: each subcommand lives in its own file and only parses
// flags and wires packages together; behaviour belongs in those packages.
package main
