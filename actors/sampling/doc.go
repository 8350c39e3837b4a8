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
//   - A kept group is forwarded unchanged on Config.Kept; a dropped one
//     (zero reward variance under filter/replace/zero_variance_mask, or a
//     group that cannot be judged) becomes a GroupFiltered on
//     Config.Filtered, which makes the controller release its capacity and
//     count its prompt as consumed.
//   - Decisions use the rewards in GroupReady; the token batch is never
//     decoded here.
package sampling
