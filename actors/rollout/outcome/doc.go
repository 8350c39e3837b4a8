// Package outcome is a rollout group's fate as a pure core (issue 31):
// when a group of n episodes is complete, when it is aborted (and so
// requeued by the controller), and which EpisodeAborted reports say so.
// The rollout actor (actors/rollout) is its shell — it runs the episodes,
// packs and stores the group and sends what the core decides; the
// simulator (sim) steps the same core for each simulated group.
//
// The rule:
//
//   - A group waits for all n episodes to end (an aborted episode does
//     not cut its siblings short: they run to their end).
//   - If any episode aborted, the group is Aborted with one report per
//     trajectory: the aborted ones with their own reason, the others
//     with "group member aborted".
//   - Otherwise it is packed: a packing error aborts it with one report
//     for the group, "pack: <error>".
//   - A packed group with no trajectory buffer is Ready at once; with
//     one it is Storing until the store's answer: stored → Ready, not
//     stored → Aborted with one report, "trajectory buffer: <error>"
//     (Unstored: nobody would ever judge the group, and the controller
//     would hold its slot for good — the stall of issue 20; if the store
//     did land after all, the group is judged and the abort ignored).
//
// The store's schedule (store.go) is this package's too, so the actor and
// the simulator retry and give up on the same numbers: a failed store is
// tried again every DefaultStoreRetry/10 until DefaultStoreFor (60 s) has
// passed since it began (StoreGivesUp), then Stored(err).
//
// EnvBackoff (backoff.go) is the actor's pace after groups its chat
// environment failed: how long the next group waits before its episodes
// start. The simulator has no chat environments, so it does not step it;
// its rule is tested on its own and through the real actor.
//
// An input that does not fit the stage (an episode ended twice, a store
// answer before packing) is refused with an error and changes nothing.
// No goroutines, locks, I/O or clock.
package outcome
