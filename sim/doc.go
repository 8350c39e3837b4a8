// Package sim is asyncrl's deterministic simulator: the whole control
// plane of a fully asynchronous RL run in one goroutine, on a virtual
// clock, with one seeded *rand.Rand from which the workload and the fault
// schedule are drawn — the FoundationDB/TigerBeetle approach.
//
// # What runs
//
// The real pure cores, wired directly by sim-side shells (no actor
// system), talking over transport/memhub with every message encoded by the
// messages codec (CBOR frames; the trainer's batch as an Arrow token
// batch):
//
//   - node ctl: the real controller core (actors/controller, with the
//     real staleness controller inside), the real sampling core
//     (actors/sampling over actors/filter, DAPO filter mode) and the
//     routing core (actors/router/policy: bounded_sticky, version gating,
//     health from heartbeats and turn timeouts, load from scraped
//     metrics), driven by a sim-side shell (ctl.go, ctlrollout.go, ctlcore.go) that
//     steps them and carries out their effects: PromptAssigned starts a
//     rollout (episodes of 1..3 turns per trajectory, n trajectories per
//     group, routed one turn at a time; the group's fate is the rollout
//     actor's real core, actors/rollout/outcome: an aborted trajectory
//     does not cut its siblings short, and once all ended an aborted
//     group sends one EpisodeAborted per trajectory), a PromptLedger entry is written
//     to the durable ledger, a TrainBatch goes to the trainer, the resend
//     timer runs on the virtual clock. Finished groups reach the sampling
//     core from the term's trajectory buffer. After a crash a new core
//     is built with controller.Resume from the ledger (step, batch in
//     flight, unsettled groups, queued prompts), as a new term with a
//     fresh buffer. The term runs the real cluster/termwatch core: it
//     probes its buffer every virtual second, tells the watch each step,
//     and steps down (the same recovery) when the watch says so — a
//     stream-loss fault that loses an unreplicated buffer needs exactly
//     that;
//   - node trainer: the real step rule (actors/trainer/steprule, the
//     trainer actor's core) decides which batch trains, which is answered
//     again (StepDone{NewVersion: the version held}) and which is
//     refused; a batch arriving while its step trains waits for it. The
//     shell checks the batch checksum, decodes its tokens, packs
//     microbatches (actors/trainer/microbatch), trains for a modelled
//     time, commits durable state, publishes through the publisher (as
//     the real trainer calls its Publisher before StepDone) and steps the
//     rule, which announces StepDone. No heartbeat: a lost StepDone is
//     recovered by the controller's retransmission, as in the real run;
//   - node pub: the publisher over the version tracker core
//     (actors/publisher/tracker), called by the trainer: payload, then manifest
//     (the commit), then LoadWeights to each engine behind; rebuilt from
//     the store on restart, then caught up to the trainer's durable step;
//   - nodes e0..eN: engines whose timing is the engine/latency core;
//     each one's weight-sync agent is the real target state machine
//     (cluster/weightsync/targets: a LoadWeights is acked again or
//     dispatched; targets coalesce, so a command that arrives during an
//     update is loaded right after it); they fetch weight chains, verify
//     each version's xxh3-128 checksum (weights/delta's format) and
//     report health, load and version.
//
// The failover scenario (failover.go) has a world of its own: 2–3 trainer
// nodes, each stepping the real cluster/term core as cluster/agent's lease
// agent does and, in its elector, the real lease core
// (cluster/lease/contender) as cluster/lease's Elector does, over a
// simulated lease KV (compare-and-set on the revision, which is the
// fencing token; TTL on the virtual clock), progress store and prompt
// ledger, and a rank host stepping the real rank-host rule
// (cluster/rankhost/fence) for the holder's trainer group's ranks on the
// other trainer nodes (failover_ranks.go: drawn from a random stream of
// its own, so it changes nothing else in a seed's run), with rollout
// nodes that pull groups and host engines, each group stepping the
// rollout outcome core (actors/rollout/outcome: its episodes, packing and
// the store to its end; failover_outcome.go); the term's pipeline is
// modelled minimally inside the shell's StartPipeline/StopPipeline, its
// trainer around the production step rule (failover_steprule.go: a failed
// publish tried again, a give-up failing that node's term), its publisher
// around the version tracker core (failover_publish.go: a publish returns
// once an engine serves the version, as cluster/weightsync's does; its
// router minimum gates where rollouts are routed), and its controller's
// abort bookkeeping as a model of its own, not the controller core (a
// group requeued once, on its rollout's reports or a dead node's sweep).
// Its planted bugs reach the term core through term.Config.Plant, and the
// world's own models (publisher, router gate, controller) through
// Config.Bugs.
//
// # Contract
//
// Run(cfg) is a pure function of cfg: the same Config gives the same
// Result, byte for byte the same event log (Result.LogHash), on any
// machine. It starts no goroutines, reads no clock and does no I/O.
// Invariants (see Invariant) are checked after every event — each
// delivery and each timer. The first violation stops the run and Run
// returns a *Violation (wrapping ErrViolation) naming the seed, the
// invariant, the last events and the fault schedule; with
// Config.Minimize the schedule is shrunk first (shortest failing prefix,
// then faults dropped one by one). A panic in a core is reported as a
// violation of InvProtocol.
//
// # Inputs (issue 37)
//
// Besides the workload and the fault schedule, a seed draws from a
// second stream of its own (seed ^ a salt, so the draws made before issue
// 37 stay as they were) the configuration the cores run under (dynamic
// sampling's mode, the stale policy, the router's policy and rules, n = 1)
// and rarer inputs (redelivered groups, per-trajectory aborts, racing
// timer ticks, odd groups, engines leaving the fleet; in the failover
// world quorum loss, clean stops, pipeline failures, stream outages, lost
// checkpoints, lagging consumed events, engine swaps, duplicated answers
// and coalesced notices): inputs.go, failover_extra.go, router.go.
// Package sim/simcov measures which branches of the cores the scenarios
// reach.
//
// Planted bugs (Config.Bugs) exist only to prove the simulator finds
// them; the CLI reaches them through a hidden flag. Those in controller
// decisions reach the real core, by perturbing its inputs or through
// controller.Config.Plant, which production never sets.
package sim
