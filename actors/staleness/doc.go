// Package staleness is the staleness controller core of asyncrl's fully
// asynchronous RL loop: it decides when a rollout worker may start a new
// group, and whether a finished group is still fresh enough to train.
//
// # Contract
//
// Controller is a plain struct: no goroutines, channels, locks, I/O, wall
// clock or randomness. Every method takes the caller's `now`; effects
// (prompts to requeue) are read back with Drain; numbers with Metrics. It
// is not safe for concurrent use — the actor shell serialises calls. A
// bad request (unknown group, duplicate delivery, wrong state, a StepDone
// ahead of the current step) is an error wrapping ErrUnknownGroup,
// ErrWrongState or ErrStepAhead and changes nothing; a broken internal
// invariant (negative counter, counters not adding up) panics.
//
// # SkyRL semantics kept exactly
//
// Config S (MaxStalenessSteps, default 4), W (NumParallelGenerationWorkers),
// B (MiniBatchSize) is valid only if B ≤ W ≤ B·(S+1). Counters submitted,
// accepted, running, filtered; current_global_step starts at 1;
//
//	capacity = min(W − running, (S + current_global_step)·B − (accepted + running))
//
// TryAcquire admits while capacity > 0 (running+1, submitted+1); Accept
// does running−1, accepted+1; Filter does accepted−1, filtered+1, so a
// filter that drops everything can never deadlock the loop.
//
// StepDone and consumed groups — our reading of SkyRL/AReaL: `accepted`
// is cumulative. Training a group does not decrement it; instead
// current_global_step+1 raises the bound (S + step)·B by B, which is
// exactly the B groups the step consumed. So StepDone only advances the
// step. (If a step trained fewer than B groups the bound still rises by
// B, as in SkyRL; the per-group check below still holds the line.)
//
// # What asyncrl adds
//
//   - Abort(group): running−1 and a Requeue{Reason: ReasonAborted} of its
//     prompt, so an engine failure loses no prompt. SkyRL has no such
//     path; the identity submitted = running + accepted + filtered +
//     aborted + stale-dropped holds at all times.
//   - CheckForTraining(group, now) enforces the bound SkyRL only counts,
//     on the lag Config.Measure names (both are reported in Decision):
//     scheduled (default, SkyRL's) = current_global_step − the step the
//     group was admitted at (j − i); token = the trainer's current version
//     (BaseVersion + step − 1) − the policy version of the group's OLDEST
//     token, as reported to Accept (UnknownVersion falls back to the
//     version at scheduling). The two agree unless an engine served older
//     weights than the trainer held when the group was scheduled; token
//     catches that, scheduled matches SkyRL (testdata/engine_lag.scenario
//     shows the input on which they disagree). With PolicyRequeue
//     (default) a violator is Dropped: accepted−1 (capacity released) and
//     a Requeue{Reason: ReasonStale} is emitted; with PolicyAccept it is
//     trained and counted in Violations. A token newer than the trainer
//     (version message racing StepDone) counts as token staleness 0 and in
//     FutureVersions.
//   - For dynamic sampling at mini-batch assembly: Release(group) hands an
//     accepted group back untrained (accepted−1, Requeue{Reason:
//     ReasonReleased}); Consume(group) counts an accepted group as used by
//     the step without training it (replace mode's bad group whose slot
//     took a copy; it stays in accepted like a trained group); WouldDrop
//     tells, without changing anything, whether CheckForTraining would
//     drop a group now. The identity becomes submitted = running +
//     accepted + filtered + aborted + stale-dropped + released.
//   - Metrics: staleness mean, max and histogram (buckets 0..S and >S) of
//     trained groups; violations; capacity; EngineIdle (∫(W − running)dt),
//     EngineBlocked (the part of it while capacity ≤ 0, i.e. caused by the
//     bound) and TrainerIdle (from start or StepDone until the B-th group
//     of the step passed CheckForTraining), all from the passed-in times.
//
// Resume(cfg, step) restarts from a checkpoint with the (step−1)·B trained
// groups counted as accepted, so a restart does not flood the engines;
// ResumeInFlight(cfg, step) restarts while step's batch is still out,
// staying at that step with its B groups counted.
//
// Group ids are promptID + "#" + an admission sequence number, so a
// requeued prompt gets a new id and a late duplicate for the old one is
// rejected as ErrUnknownGroup instead of corrupting the counters.
package staleness
