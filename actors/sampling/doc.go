// Package sampling is the dynamic-sampling actor: a thin actor shell
// around Core, which asks the pure filter core (package filter,
// Config.Decide) about every finished group.
//
// # Contract
//
//   - In: GroupReady from the rollout actors — from a durable stream (the
//     trajectory buffer; acked only after the core stepped it, so a full
//     mailbox or a crash means redelivery, not loss) or a plain queue
//     subscription (queue "sampling"). A redelivered group is forwarded
//     again; the controller ignores the duplicate.
//   - A kept group is forwarded on Config.Kept — from the trajectory
//     buffer (SpawnBuffer) by reference: its GroupReady.Batch names the
//     stored message (subject, sequence, size, checksum) and carries no
//     bytes; the trainer fetches them. With Buffer.Ledger set, the stored
//     message is deleted once the controller's PromptLedger settles the
//     group (trained, filtered, requeued) — see refs.go for what keeps a
//     referenced group alive until its step is trained. From a plain
//     subscription a group is forwarded unchanged (batch inline). A bad one under
//     filter or replace (zero reward variance, one trajectory while
//     n_samples_per_prompt > 1, a NaN reward), or a group that cannot be
//     judged, becomes a GroupFiltered on Config.Filtered, which makes the
//     controller release its capacity and count its prompt as consumed.
//     The controller counts it in its generation batch: replace mode fills
//     its slot with a good group's copy at mini-batch assembly. Under
//     zero_variance_mask every group is forwarded; the controller flags
//     the zero-variance ones (judged on their rewards and TrainedTokens)
//     in the TrainBatch and the trainer zeroes their loss masks.
//   - Decisions use the rewards in GroupReady; the token batch is never
//     decoded here.
package sampling
