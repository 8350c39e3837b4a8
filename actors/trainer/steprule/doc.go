// Package steprule is the trainer's step rule as a pure core (issue 31):
// which TrainBatch the trainer trains, which it answers again and which
// it refuses. The trainer actor (actors/trainer) runs it on the generic
// RawNode loop (actors/loop); the simulator (sim) steps the same core, so
// the simulated trainer decides exactly as the real one.
//
// The rule, for a trainer holding (local) version v:
//
//   - batches are handled one at a time, in the order they arrived; one
//     that arrives while a step trains waits for it (a retransmission of
//     the batch being trained included: it is answered once the step is
//     done, never trained twice);
//   - a batch for step ≤ v (already trained) is answered again with
//     StepDone{Step, NewVersion: v} and not trained, so a controller that
//     missed the StepDone advances;
//   - a batch for step v+1 is trained (Train); when the shell reports it
//     Trained, the core announces StepDone{Step, NewVersion: the version
//     the trainer now holds};
//   - a batch for any later step is refused (Refuse): the controller sent
//     a step the trainer cannot train; the shell reports the error, the
//     trainer keeps its version and goes on with the next batch;
//   - a step that Failed before the trainer stepped (decode, plan,
//     train) changes nothing: its retransmission trains it;
//   - a step that Failed after the trainer stepped (its publish failed)
//     is held unpublished: it is not announced (no StepDone, so the
//     controller does not advance and the engines never lag a version the
//     run counts as live) and never trained again (its prompts are
//     trained exactly once); the shell is asked to Publish the held
//     weights again, and only a publish that succeeds announces the step.
//     With a Retry (NewRetrying: the trainer actor's and the
//     simulator's trainer's, RetryOf publisher.attempts and
//     publisher.retry_backoff) the rule asks after
//     a wait that doubles with each failed try, and gives up (GiveUp: the
//     shell ends training, and the run with it) after Retry.Attempts
//     tries; a retransmission of the batch meanwhile does not publish
//     sooner. Without one (New: no shell's) each retransmission of the
//     batch asks, and the rule never gives up.
//     Meanwhile an older step is answered with the published version and
//     a later step is refused.
//
// There is no heartbeat: a lost StepDone is recovered by the
// controller's retransmission of its batch (answered by the second rule).
//
// Shape: Step(now, Input), Tick(now) (only a held step's retry is timed),
// Ready() effects, Advance(). Inputs: Received, Trained, Failed. Effects:
// Train, Publish, Announce, Refuse, GiveUp. No goroutines, locks, I/O or
// clock; the versions the shell reports are the authority (the Stepper
// counts its own steps).
package steprule
