// Package controller is the staleness controller actor of the fully
// asynchronous loop: a thin actor shell (package actors) around Core,
// which wraps the pure staleness core (package staleness) with the prompt
// queue and the mini-batch assembly.
//
// # Contract
//
//   - Admission: after every message (and at Start) the core admits
//     groups while staleness.Controller.Capacity() > 0 and the trainer has
//     not passed Config.MaxSteps: requeued prompts first (oldest first),
//     then fresh ones from the Source. Each admission publishes a
//     PromptAssigned (Version = the policy version at admission) and a
//     PromptLedger "consumed".
//   - GroupReady (kept by the sampling actor): Accept with the group's
//     oldest token version; the group joins the queue for training.
//     GroupFiltered: Accept then Filter — capacity is released and the
//     prompt is consumed (ledger "filtered"), so the filter cannot
//     deadlock the loop. EpisodeAborted: Abort — the prompt is requeued
//     (GroupRequeued, ledger "requeued"); further aborts of the same group
//     are duplicates and change nothing.
//   - Training: while no TrainBatch is out for the current step and at
//     least B groups wait, they are checked with CheckForTraining in
//     arrival order (Config.Staleness.Measure: scheduled, SkyRL's, or
//     token); a stale one is requeued (reason stale), a fresh one is
//     announced with GroupAccepted. When B groups passed, the step's
//     TrainBatch goes out with one reference per group (GroupRef: where
//     its token batch is stored, as the sampling actor forwarded it) —
//     the core never decodes or re-encodes token data; the trainer
//     fetches and assembles (actors/trainer/assemble).
//   - Dynamic sampling (Config.Sampling, SkyRL's trainer_utils semantics;
//     sampling.go): a generation batch is B consecutive finished groups,
//     kept or filtered. filter: kept groups accumulate across generation
//     batches until B are kept (Stats.GenerationBatches per step); once
//     max_sample_batches (−1 unbounded) arrived without a full step, the
//     held unchecked groups are handed back (Release → GroupRequeued
//     reason max_sample_batches: nothing lost) and SamplingExhausted is
//     published on Subjects.Settled. replace: each generation batch is
//     judged whole; if good > B × min_replace_ratio every bad (or stale)
//     slot takes a copy of a fresh good group, donors from Config.Rand,
//     all per-trajectory data moving together, and the bad groups are
//     consumed by the step (staleness Consume: they keep their place in
//     the bound, as trained groups do, so replace generates B groups per
//     step like SkyRL); else the batch is discarded — all B slots
//     released (Filter), so the loop cannot deadlock — and sampled again,
//     up to max_sample_batches. zero_variance_mask: groups stay; a
//     zero-variance group (judged on its rewards and per-trajectory
//     TrainedTokens, filter.ZeroVarianceMask's rule) is flagged ZeroMask
//     in the TrainBatch and the trainer zeroes its loss masks; B groups
//     that would leave nothing to train are filtered instead of sent, and
//     count toward max_sample_batches.
//   - StepDone(step) advances the step and marks that step's groups
//     trained in the ledger. A duplicate StepDone is ignored.
//   - After every message a CapacityChanged carries the counters.
//
// Every admitted group therefore ends trained, filtered or requeued exactly
// once, or is still held (running, queued, or in the step being trained)
// when the run stops — Core.InFlight counts those.
//
// The core owns no goroutines, clock or I/O; merging token batches is pure
// byte work. A restart after a panic starts from a fresh core (the ledger
// stream holds what was settled).
package controller
