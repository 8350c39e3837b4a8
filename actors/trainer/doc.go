// Package trainer is the trainer actor of the fully asynchronous loop.
//
// # Contract
//
//   - In: TrainBatch for step s (the mini-batch the controller assembled,
//     one Arrow token batch inline). Which batch is trained, answered
//     again or refused is the step rule's (actors/trainer/steprule, the
//     core the simulator steps too): the trainer holds version s−1; a
//     batch for an older step is a redelivery and only re-announces
//     StepDone{Step, NewVersion: the version held}; one that arrives while
//     its step trains waits and is answered after it; a batch for a later
//     step is an error.
//   - Prepare turns the batch into policy sequences with GRPO advantages
//     per group ((r − mean)/(std + 1e-6), or r − mean with NormStd false)
//     and plans microbatches (package trainer/microbatch). Train follows
//     the plan on the built-in backend (model.Trainer): it computes the
//     mini-batch's loss-reduction totals, accumulates each microbatch's
//     gradient — ranks in rank order, each rank's microbatches in plan
//     order, padding microbatches as one loss-mask-0 token — and takes ONE
//     optimiser step per mini-batch. Peak memory is bounded by
//     max_tokens_per_microbatch; the gradient equals a single pass over the
//     mini-batch up to float summation order. The loss is SkyRL's: the PPO
//     "old" logprobs are the trainer's own forward pass before the step
//     (ratio 1), the rollout logprobs only weight tokens through truncated
//     importance sampling (trainer.tis_ratio_type); each sequence carries
//     its group id for prompt_mean, and the totals count the microbatches
//     holding trained tokens for token_mean_legacy. StepDone's stats add
//     is_ratio, the mean exp(logp_old − logp_rollout). A remote backend
//     follows the same plan.
//   - After the step the new BF16 serving copy goes to the Publisher (in
//     process: pause every engine in the configured mode, swap weights,
//     resume, tell the router), then WeightsPublished and StepDone{Step: s,
//     NewVersion: s} are published.
//   - A publish that fails after the Stepper stepped does not acknowledge
//     the step: no StepDone, no record, no WeightsPublished. The trained
//     weights are held and published again — never trained again — after
//     a wait that doubles with each try (Config.PublishRetry: the run's
//     publisher.attempts and publisher.retry_backoff). Meanwhile the run
//     does not end (Err stays nil), but no later step trains while the
//     step is held, and only a publish that succeeds announces the step.
//     So a transient failure (every engine briefly unreachable) costs a
//     wait, not the run; every step's prompts are trained exactly once
//     and a step is never counted live before the engines have it. After
//     the last try Err reports the failure, naming the version and the
//     publisher's error (a run ends on it; a cluster term steps down and
//     the next term trains the step from the last durable checkpoint,
//     where it was never recorded). A failure after the publish — the
//     cluster term's checkpoint of the version (AfterPublishError) — is
//     retried the same way, and the give-up names it.
//   - A remote worker publishes through actors/publisher.BusPublisher: each
//     version's serving checkpoint written to a directory, announced with
//     WeightsPublished, returning once an EngineVersionAck for it arrives.
//   - Every trained step's StepRecord goes to Config.OnStep (the node's
//     step log, the run report's steps.jsonl); the actor keeps the newest
//     RecordsKept for pollers (StepCount, StepsSince: no copy of every
//     record each time, and a next index that says what a slow poller
//     missed), a record's GroupIDs only for the newest GroupIDsKept, so
//     its memory is bounded however long the run; Err the error that
//     stopped training (the node ends the run on it).
//
// The actor is a shell on the generic RawNode loop (actors/loop, run.go):
// training is blocking work, so it runs inside the loop's Apply on the
// actor's own goroutine, one batch per turn, fed by a bounded inbox (16
// batches; a full one holds the bus's delivery).
package trainer
