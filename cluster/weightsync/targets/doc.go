// Package targets is the weight-sync agent's target state machine as a
// pure core (issue 31): which version an engine's agent works on next,
// when it is idle, when it acks again, and what a failure or a stopped
// engine does to it. cluster/weightsync's Agent is its shell (one
// goroutine per engine, the core under the agent's mutex); the simulator
// (sim) steps the same core for each simulated engine.
//
// State: want (the newest target dispatched), have (the newest target
// handled: loaded, or failed), failed (the last target that failed, while
// have is still it) and gone (the engine was stopped for good).
//
//   - Dispatch(t) raises want to t (targets coalesce: while the agent
//     works on v, newer dispatches only raise the next target). A
//     dispatch of the target that failed, while have is still it, makes
//     it due again (an engine host's LoadWeights is resent until acked).
//   - Next says which target to work on: want, while want > have and the
//     engine is not gone.
//   - Handled(t, outcome) records the outcome: have = t either way (a
//     failure is retried by the next dispatch of t, or of a newer one);
//     Closed makes the engine gone (out of rotation for good).
//   - Reack(v) says whether to ack again, and which version: only when
//     idle, not gone, and the version handled is ≥ v, ≥ 0 and did not
//     fail (a repeated command whose ack was lost).
//
// No goroutines, locks, I/O or clock: the shell serialises calls.
package targets
