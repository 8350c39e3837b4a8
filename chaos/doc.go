// Package chaos attacks the real asyncrl loop — embedded NATS, HTTP
// engines, the router, every actor and a trainer — with a seeded schedule
// of faults, then checks the invariants the loop promises from its ledger
// and the router's view of the engines.
//
// # Contract
//
// Run(ctx, cfg) starts one node (package cluster/node) with the trainer on
// the remote backend, run in-process by node.RunWorker, so every version is
// a serving checkpoint on disk. The chaos fleet — Config.Engines built-in
// engines, each behind a faultproxy — is what the router serves from: the
// fleet's proxies are the run's engines.external_urls, and the node's own
// built-in engine (engines.count ≥ 1 is required) is taken out of the
// router through its admin API once the node runs. The fleet loads every
// WeightsPublished version into its engines and records it on the router
// (POST /admin/replicas/version), as a weight publisher would.
//
// Schedule(seed, …) is the pure core that draws the faults: the same seed
// gives the same schedule (kinds, targets, times, holds). The shell plays it
// on the wall clock: engine-kill shuts an engine down (listener, loop and
// in-flight requests) and starts a new one on the same port after the hold,
// serving the latest version; latency, reset and blackhole switch the
// engine's proxy for the hold. At most Engines−1 engines are faulted at
// once, so the loop can always make progress.
//
// After Duration every fault is healed, the run is stopped cleanly, the
// prompt ledger is read back from the JetStream files the node left on disk,
// and the invariants are checked on it (see Check and Evidence). Report.Table prints the faults
// injected and each invariant's verdict; Run returns ErrViolation when one
// is broken. The opt-in bus-reconnect kind drops the node's NATS
// connection. Bus faults by subject (drop, duplicate, delay) need the node
// to accept a transport.Bus decorator (chaos/faultbus is one), which
// cluster/node does not offer yet; those kinds are refused with ErrConfig.
package chaos
